"""krea-ops core: cluster access, telemetry, health, runbook, exporters and simulator.

This package never imports a UI library (textual, typer, rich); see tests/test_layers.py.
"""

__version__ = "0.1.0"
