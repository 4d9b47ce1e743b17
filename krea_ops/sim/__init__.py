"""Kubernetes-compatible API server simulator bundled with krea-ops."""
