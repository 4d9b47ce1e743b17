"""Cluster access over the official ``kubernetes`` client."""
