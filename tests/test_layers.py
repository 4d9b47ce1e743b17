"""The core never imports the UI; commands and screens never import each other."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UI = {"textual", "typer", "rich", "click", "commands", "screens"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_modules_import_no_ui_library() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imported_roots(p) & UI)
        for p in (ROOT / "krea_ops").rglob("*.py")
        if _imported_roots(p) & UI
    }
    assert offenders == {}


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is part of the dev extra"
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_the_core_loads_no_ui_library() -> None:
    code = (
        "import sys, krea_ops.exporters.server, krea_ops.settings;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'textual','typer','rich','click'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
