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


def test_the_runbook_and_the_cluster_access_layer_import_in_no_circle() -> None:
    """The move spec lives with the plan, the audit log's replay with the audit log, and
    the object rules (controller of a pod, tolerations, Ready, selectors) in
    ``kube.rules``: no module of the runbook or of ``kube`` reaches itself through
    another, lazily or not."""
    import grimp

    graph = grimp.build_graph("krea_ops")
    mods = sorted(
        m for m in graph.modules if m.startswith(("krea_ops.runbook.", "krea_ops.kube."))
    )
    circles = [
        (a, b)
        for a in mods
        for b in graph.find_modules_directly_imported_by(a)
        if b in mods and b != a and graph.chain_exists(importer=b, imported=a)
    ]
    assert circles == []


def test_no_two_classes_of_the_product_share_a_name() -> None:
    """A name says one thing: the console's health reading is not the node-health
    controller, a plan finding's severity is not a node's, the simulator's JobSet client
    is not its core client. (Private helpers, ``_Handler`` and the like, aside.)"""
    seen: dict[str, list[str]] = {}
    for root in ("krea_ops", "commands", "screens"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    seen.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
    # the module names the issue found twice
    faults = [p for p in (ROOT / "krea_ops").rglob("faults.py")]
    assert len(faults) == 1, faults
