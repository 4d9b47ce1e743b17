"""The core never imports the UI; commands and screens never import each other; the product
never imports the simulator (only the commands that start it do, lazily)."""

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


# The commands that start the simulator (`krea-ops sim ...`, `krea-ops demo`).
SIM_STARTERS = {"commands/sim.py", "commands/dashboard.py"}


def _sim_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, lazy) of each import of krea_ops.sim in a file; lazy = inside a function."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            if any(n == "krea_ops.sim" or n.startswith("krea_ops.sim.") for n in names):
                found.append((child.lineno, in_function))
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, in_function or inner)

    visit(tree, False)
    return found


def test_only_the_commands_that_start_the_simulator_import_it_and_only_lazily() -> None:
    product = [
        p
        for top in ("krea_ops", "commands", "screens")
        for p in (ROOT / top).rglob("*.py")
        if not p.relative_to(ROOT).is_relative_to("krea_ops/sim")
    ]
    offenders = {}
    for p in product:
        rel = str(p.relative_to(ROOT))
        imports = _sim_imports(p)
        bad = [line for line, lazy in imports if rel not in SIM_STARTERS or not lazy]
        if bad:
            offenders[rel] = bad
    assert offenders == {}, "import krea_ops.sim only inside the sim/demo commands' functions"
    # the two starters do import it (otherwise the allowance above is stale)
    assert all(_sim_imports(ROOT / rel) for rel in SIM_STARTERS)


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
