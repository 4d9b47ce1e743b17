"""Kubernetes protobuf wire format for the simulated API server (see README.md)."""
