"""The embedded control plane's stand-ins: scheduler, Job and JobSet controllers, Kueue,
the workload controllers and the in-process kube-controller-manager parts. They run only
with the embedded API server; on the upstream control plane the real binaries do this.
"""
