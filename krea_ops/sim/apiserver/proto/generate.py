"""Regenerate the protobuf modules and the Go field table of this package.

Run at generation time only (CI never runs it; it needs ``grpcio-tools``' protoc)::

    python -m krea_ops.sim.apiserver.proto.generate \
        --api ~/src/api --apimachinery ~/src/apimachinery

where the two directories are work trees of k8s.io/api and k8s.io/apimachinery at the
tags README.md names. It copies the ``generated.proto`` files of the packages the
simulator serves into a scratch tree under flat names (``core_v1.proto``,
``meta_v1.proto``, ...) inside this package's path, so that protoc's Python modules
import each other as ``krea_ops.sim.apiserver.proto.X_pb2`` rather than as a top-level ``k8s``
package; the messages keep their upstream full names (``k8s.io.api.core.v1.Pod``).

The second output, ``gofields.py``, is read from the Go types next to each
``generated.proto``: for every message field its JSON name, ``omitempty``, whether the
Go field is a pointer, and the Go type as ``encoding/json`` names it in errors. The
proto files alone do not say how the object reads as JSON (the real server decodes the
protobuf into Go structs and writes them with ``encoding/json``).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PKG_PATH = "krea_ops/sim/apiserver/proto"

# (repository, package directory, flat module name)
PACKAGES: tuple[tuple[str, str, str], ...] = (
    ("apimachinery", "pkg/api/resource", "resource"),
    ("apimachinery", "pkg/apis/meta/v1", "meta_v1"),
    ("apimachinery", "pkg/runtime", "runtime"),
    ("apimachinery", "pkg/runtime/schema", "runtime_schema"),
    ("apimachinery", "pkg/util/intstr", "intstr"),
    ("api", "core/v1", "core_v1"),
    ("api", "apps/v1", "apps_v1"),
    ("api", "batch/v1", "batch_v1"),
    ("api", "policy/v1", "policy_v1"),
    ("api", "networking/v1", "networking_v1"),
    ("api", "coordination/v1", "coordination_v1"),
    ("api", "scheduling/v1", "scheduling_v1"),
)

_IMPORT_RE = re.compile(r'^import "k8s\.io/(api|apimachinery)/(.+)/generated\.proto";$', re.M)
_PACKAGE_RE = re.compile(r"^package ([\w.]+);$", re.M)
_STRUCT_RE = re.compile(r"^type (\w+) struct \{$")
_FIELD_RE = re.compile(r"^\s*(?:(\w+)\s+)?([\w.*\[\]]+)\s+`([^`]*)`\s*$")
_TAG_RE = re.compile(r'(\w+):"([^"]*)"')
_GO_BUILTINS = {
    "string",
    "bool",
    "byte",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
}


def _go_imports(text: str) -> dict[str, str]:
    """alias -> package name for one Go file's imports."""
    out: dict[str, str] = {}
    for alias, path in re.findall(r'^\s*(?:(\w+)\s+)?"([\w./-]+)"\s*$', text, re.M):
        out[alias or path.rsplit("/", 1)[-1]] = path.rsplit("/", 1)[-1]
    return out


def _go_type_name(expr: str, pkg: str, imports: dict[str, str]) -> str:
    """The Go type as reflect (and so encoding/json's errors) prints it."""
    if expr.startswith("*"):
        return _go_type_name(expr[1:], pkg, imports)
    if expr.startswith("[]"):
        return "[]" + _go_type_name(expr[2:], pkg, imports)
    if expr.startswith("map["):
        depth, i = 0, 3
        for i in range(3, len(expr)):
            depth += {"[": 1, "]": -1}.get(expr[i], 0)
            if depth == 0:
                break
        key, value = expr[4:i], expr[i + 1 :]
        return (
            f"map[{_go_type_name(key, pkg, imports)}]{_go_type_name(value, pkg, imports)}"
        )
    if expr in _GO_BUILTINS:
        return expr
    if "." in expr:
        alias, name = expr.split(".", 1)
        return f"{imports.get(alias, alias)}.{name}"
    return f"{pkg}.{expr}"


def go_fields(directory: Path, proto_package: str) -> dict[str, dict[str, list[Any]]]:
    """message full name -> proto field name -> [json name, omitempty, pointer, go type]."""
    table: dict[str, dict[str, list[Any]]] = {}
    for path in sorted(directory.glob("*.go")):
        if path.name.endswith("_test.go") or path.name.startswith("zz_generated"):
            continue
        text = path.read_text()
        pkg_match = re.search(r"^package (\w+)", text, re.M)
        if pkg_match is None:
            continue
        pkg, imports = pkg_match.group(1), _go_imports(text)
        current: dict[str, list[Any]] | None = None
        for line in text.splitlines():
            struct = _STRUCT_RE.match(line)
            if struct:
                current = table.setdefault(f"{proto_package}.{struct.group(1)}", {})
                continue
            if line.startswith("}"):
                current = None
                continue
            if current is None:
                continue
            field = _FIELD_RE.match(line)
            if field is None:
                continue
            tags = dict(_TAG_RE.findall(field.group(3)))
            proto, js = tags.get("protobuf"), tags.get("json")
            if not proto or proto == "-" or js is None:
                continue
            opts = dict(p.split("=", 1) for p in proto.split(",") if "=" in p)
            # An embedded struct's tag may leave the name out: protoc named it after the
            # Go field (EphemeralContainer's ephemeralContainerCommon).
            go_name = field.group(1) or field.group(2).lstrip("*").rsplit(".", 1)[-1]
            name = opts.get("name") or go_name[:1].lower() + go_name[1:]
            json_name, _, json_opts = js.partition(",")
            expr = field.group(2)
            current[name] = [
                json_name,
                "omitempty" in json_opts.split(","),
                expr.startswith("*"),
                _go_type_name(expr, pkg, imports),
            ]
    return {k: v for k, v in table.items() if v}


def _header(text: str) -> str:
    return "# ruff: noqa\n# mypy: ignore-errors\n" + text


def generate(api: Path, apimachinery: Path, out: Path = HERE) -> None:
    from grpc_tools import protoc  # generation-time only

    roots = {"api": api, "apimachinery": apimachinery}
    flat = {(repo, d): name for repo, d, name in PACKAGES}
    table: dict[str, dict[str, list[Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / PKG_PATH
        scratch.mkdir(parents=True)
        for repo, directory, name in PACKAGES:
            source = roots[repo] / directory
            text = (source / "generated.proto").read_text()

            def local(m: re.Match[str]) -> str:
                return f'import "{PKG_PATH}/{flat[(m.group(1), m.group(2))]}.proto";'

            (scratch / f"{name}.proto").write_text(_IMPORT_RE.sub(local, text))
            package = _PACKAGE_RE.search(text)
            assert package is not None, source
            table.update(go_fields(source, package.group(1)))
        pyout = Path(tmp) / "py"
        pyout.mkdir()
        args = ["protoc", f"-I{tmp}", f"--python_out={pyout}"]
        args += [f"{PKG_PATH}/{name}.proto" for _, _, name in PACKAGES]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        for _, _, name in PACKAGES:
            generated = pyout / PKG_PATH / f"{name}_pb2.py"
            (out / generated.name).write_text(_header(generated.read_text()))
    lines = [
        '"""Generated by generate.py from the Go types of k8s.io/api and k8s.io/apimachinery:',
        "message -> proto field -> [json name, omitempty, pointer, Go type]. Do not edit.\"\"\"",
        "",
        "# ruff: noqa",
        "from typing import Any",
        "",
        "FIELDS: dict[str, dict[str, list[Any]]] = {",
    ]
    for message in sorted(table):
        lines.append(f"    {message!r}: {{")
        for field, spec in table[message].items():
            lines.append(f"        {field!r}: {spec!r},")
        lines.append("    },")
    lines.append("}")
    (out / "gofields.py").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", type=Path, required=True, help="a k8s.io/api work tree")
    parser.add_argument(
        "--apimachinery", type=Path, required=True, help="a k8s.io/apimachinery work tree"
    )
    parser.add_argument("--out", type=Path, default=HERE)
    ns = parser.parse_args(argv)
    generate(ns.api, ns.apimachinery, ns.out)
    print(f"wrote {len(PACKAGES)} modules and gofields.py to {ns.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
