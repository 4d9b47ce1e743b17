"""The simulated world's modules: no import cycles, one owner of the actors, one parser.

Read from the source with ``ast`` (every import counts, also those inside functions and
under ``TYPE_CHECKING``: a cycle hidden in a function is still a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SIM = ROOT / "krea_ops" / "sim"
# The world's modules: the machines, the stand-ins of the embedded control plane, what
# they share, and ``world.py`` that assembles them.
PACKAGES = ("common", "machines", "standins")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def world_files() -> dict[str, Path]:
    """``package.module`` (``world`` for world.py) -> its file."""
    out = {"world": SIM / "world.py"}
    for pkg in PACKAGES:
        for p in (SIM / pkg).glob("*.py"):
            if p.stem != "__init__":
                out[f"{pkg}.{p.stem}"] = p
    return out


def world_imports(path: Path) -> set[str]:
    """The world modules (``package.module``) that ``path`` imports, anywhere in it."""
    prefix = "krea_ops.sim."
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path.name}: relative import"
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(prefix):
                parts = name.removeprefix(prefix).split(".")
                if parts[0] == "world":
                    out.add("world")
                elif parts[0] in PACKAGES and len(parts) > 1:
                    out.add(f"{parts[0]}.{parts[1]}")
    return out


def import_graph() -> dict[str, set[str]]:
    files = world_files()
    return {m: (world_imports(p) & set(files)) - {m} for m, p in sorted(files.items())}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    source = SIM / "machines" / "faults.py"
    assert "common.actor" in world_imports(source)  # it does read the imports


def test_world_modules_import_each_other_without_cycles() -> None:
    graph = import_graph()
    assert {"common.objects", "machines.kubelet", "standins.scheduler", "world"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_only_world_py_assembles_the_actors() -> None:
    graph = import_graph()
    assert [m for m, deps in graph.items() if "world" in deps] == []
    # No module hands out its own actors any more ...
    builders = {
        p.stem
        for p in world_files().values()
        for node in _tree(p).body
        if isinstance(node, ast.FunctionDef) and node.name == "actors"
    }
    assert builders == set()
    # ... and world.py names every actor class there is: every class descending from
    # Actor (through a shared base such as common/api.py's ViewActor too) that no other
    # class derives from
    bases = {
        node.name: {b.id for b in node.bases if isinstance(b, ast.Name)}
        for p in world_files().values()
        for node in _tree(p).body
        if isinstance(node, ast.ClassDef)
    }
    actors = {"Actor"}
    while grown := {c for c, bs in bases.items() if bs & actors} - actors:
        actors |= grown
    derived_from = {b for bs in bases.values() for b in bs}
    actor_classes = {c for c in actors - {"Actor"} if c not in derived_from}
    named = {n.id for n in ast.walk(_tree(SIM / "world.py")) if isinstance(n, ast.Name)}
    assert actor_classes, "the world has actors"
    assert actor_classes - named == set()


def test_world_modules_use_the_products_time_and_quantity_parsers() -> None:
    """Timestamps and quantities go through ``krea_ops.kube.times`` and
    ``krea_ops.kube.quantity``: no module formats or parses them on its own."""
    own = {"strftime", "strptime", "fromisoformat"}
    offenders = sorted(
        f"{p.name}:{node.lineno} {node.attr}"
        for p in world_files().values()
        for node in ast.walk(_tree(p))
        if isinstance(node, ast.Attribute) and node.attr in own
    )
    assert offenders == []
    copies = {"quantity", "_quantity", "parse_time", "_parse_time", "rfc3339", "_rfc3339"}
    defined = sorted(
        f"{p.name} {node.name}"
        for p in world_files().values()
        for node in _tree(p).body
        if isinstance(node, ast.FunctionDef) and node.name in copies | {"micro_time", "_stamp"}
    )
    assert defined == []
