"""The embedded API server: a Kubernetes API server written for the simulator, with the
in-process parts of kube-controller-manager the API's semantics need (``standins.kcm``).
"""
