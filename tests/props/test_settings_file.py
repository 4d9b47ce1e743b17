"""The settings file and ``KREA_OPS_*`` environment (krea_ops/settings.py): any file
content and any environment value gives a Settings or one ``BadInput`` line."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from krea_ops.errors import BadInput
from krea_ops.settings import ENV_PREFIX, Settings, load_settings
from tests.props.conftest import one_line

FIELDS = [f.name for f in dataclasses.fields(Settings)]

yaml_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)
# Mostly real setting names (so values are coerced), some unknown ones.
keys = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from([f.replace("_", "-") for f in FIELDS]),
    st.text(max_size=10),
)
documents = st.dictionaries(keys, yaml_values, max_size=4)


def check(content: bytes, env: dict[str, str] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_bytes(content)
        try:
            settings = load_settings(env={ENV_PREFIX + "CONFIG": str(path), **(env or {})})
        except BadInput as exc:
            assert one_line(str(exc)), repr(str(exc))
            return
    for f in dataclasses.fields(Settings):
        value = getattr(settings, f.name)
        if "None" not in str(f.type):
            assert value is not None, f"{f.name} is None, its type is {f.type}"
        if isinstance(value, float):
            assert math.isfinite(value), f"{f.name} = {value}"


@given(documents)
@example({"max_share": float("nan")})
@example({"exporter_fake_gpus": float("inf")})
@example({"telemetry_window_s": 10**400})
@example({"max_share": None})  # "max_share:" with no value
def test_any_settings_document(doc: dict[str, object]) -> None:
    check(yaml.safe_dump(doc, allow_unicode=True).encode())


@given(st.binary(max_size=200))
@example(b"\xff\xfe max_share: 1")  # not UTF-8
@example(b"[" * 2000)  # nested deeper than the parser recurses
@example(b"exporter_fake_gpus: " + b"9" * 5000)  # an int past int()'s digit limit
@example(b"max_share: !!python/object/apply:os.system ['true']")
def test_any_settings_file_bytes(content: bytes) -> None:
    check(content)


@given(st.dictionaries(st.sampled_from(FIELDS), st.text(max_size=20), max_size=3))
@example({"max_share": "nan"})
@example({"dashboard_refresh_s": "-inf"})
@example({"exporter_fake_gpus": "1e3"})
@example({"prometheus_url": "0\n0"})  # found by the explore profile
def test_any_environment(values: dict[str, str]) -> None:
    env = {ENV_PREFIX + name.upper(): value for name, value in values.items()}
    if any("\x00" in v for v in env.values()):
        return  # an environment cannot hold NUL
    check(b"", env)
