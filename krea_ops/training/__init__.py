"""DiT pre-training runs: checkpoint discovery and validation (``checkpoints``) and
checkpoint-interval advice (``advice``); launch and resume manifests come later."""
