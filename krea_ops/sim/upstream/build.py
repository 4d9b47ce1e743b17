"""Find or build the upstream binaries with ``deploy/dev/upstream/build.sh``.

The script pins the versions (``versions.env``), builds through the wrapper module
beside it and caches the result outside the checkout, keyed by the versions, ``go.sum``
and the Go toolchain; a second build is a no-op. This module only runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from krea_ops.errors import Unavailable

GO_MISSING = "Go 1.26 is needed to build the upstream control plane; the embedded one needs nothing"
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kueue",
    "jobset-controller",
)


def build_dir() -> Path:
    """``deploy/dev/upstream`` of the checkout krea-ops runs from."""
    root = Path(__file__).resolve().parents[3]
    here = root / "deploy" / "dev" / "upstream"
    if not (here / "build.sh").is_file():
        raise Unavailable(
            f"{here}/build.sh not found: the upstream control plane builds from a checkout "
            "of krea-ops (pip install -e .)"
        )
    return here


def versions() -> dict[str, str]:
    """The pins of ``versions.env``."""
    out: dict[str, str] = {}
    for line in (build_dir() / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def _run(args: list[str], log: Callable[[str], None] | None) -> str:
    if shutil.which("go") is None:
        raise Unavailable(GO_MISSING)
    proc = subprocess.Popen(
        ["bash", str(build_dir() / "build.sh"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err_tail: list[str] = []
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        err_tail = ([*err_tail, line])[-20:]
        if log is not None and not line.startswith("go: downloading"):
            log(line)
    out = proc.stdout.read().strip()
    if proc.wait() != 0:
        last = next((x for x in reversed(err_tail) if x.strip()), "no output")
        raise Unavailable(f"building the upstream control plane failed: {last}")
    return out.splitlines()[-1] if out else ""


def cached_dir() -> Path:
    """Where the binaries of the pinned versions are (or would be), building nothing."""
    return Path(_run(["--print-dir"], None))


def ensure_built(log: Callable[[str], None] | None = None) -> Path:
    """The directory with ``bin/`` and ``manifests/`` of the pinned versions, built now if
    the cache does not have them (tens of minutes cold on two cores)."""
    override = os.environ.get("KREA_OPS_UPSTREAM_DIR")
    found = Path(override) if override else Path(_run([], log))
    missing = [b for b in BINARIES if not (found / "bin" / b).is_file()]
    if missing:
        raise Unavailable(f"upstream binaries missing in {found}/bin: {', '.join(missing)}")
    return found


def is_built() -> Path | None:
    """The cached directory when the binaries are there, else None (never builds)."""
    override = os.environ.get("KREA_OPS_UPSTREAM_DIR")
    try:
        found = Path(override) if override else cached_dir()
    except Unavailable:
        return None
    return found if all((found / "bin" / b).is_file() for b in BINARIES) else None
