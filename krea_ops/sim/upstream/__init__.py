"""The upstream control plane: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler, the Kueue manager and the JobSet controller, built from their Go modules
(``build``) and run on loopback in a state directory (``controlplane``), for the
simulated machines to run on instead of the embedded API server and its stand-ins."""
