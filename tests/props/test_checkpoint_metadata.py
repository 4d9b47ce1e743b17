"""Checkpoint metadata (krea_ops/training/checkpoints.py): DCP ``.metadata`` (the pickle
torch writes, and the simulator's JSON), Megatron's ``latest_checkpointed_iteration.txt``
and whole checkpoint directories. Whatever the bytes, a checkpoint is complete or
incomplete with a one-line reason; reading never raises and never runs what a pickle
names."""

from __future__ import annotations

import json
import pickle
import tempfile
from pathlib import Path

from hypothesis import assume, example, given
from hypothesis import strategies as st

from krea_ops.training.checkpoints import (
    MEGATRON_TRACKER,
    discover,
    inspect_checkpoint,
    read_dcp_metadata,
    read_tracker,
)
from tests.props.conftest import one_line
from tests.training.dcp_fixture import dcp_metadata_bytes

NOW = 2_000_000_000.0  # well after any file these tests write: nothing "being written"

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
# Shard names: plausible ones, and ones with separators, "..", control characters.
shard_names = st.one_of(
    st.from_regex(r"__[0-9]{1,2}_0\.distcp", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12),
    st.sampled_from(["../outside", "/etc/passwd", "a/../../b", "x\ny", ".metadata"]),
)
storage_entries = st.dictionaries(
    shard_names,
    st.one_of(
        st.fixed_dictionaries({"offset": st.integers(-5, 2**64), "length": st.integers(-5, 2**64)}),
        json_values,
    ),
    max_size=4,
)


def _check_read(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ".metadata"
        path.write_bytes(raw)
        read = read_dcp_metadata(path)
    if read.error is not None:
        assert read.required is None
        assert one_line(read.error), repr(read.error)
    else:
        assert read.required is not None
        for rel, need in read.required.items():
            assert isinstance(rel, str) and rel and isinstance(need, int) and need >= 0
            assert not Path(rel).is_absolute() and ".." not in Path(rel).parts


@given(st.binary(max_size=300))
@example(b'{"a":' + b"[" * 100_000)  # JSON nested past the recursion limit
@example(pickle.dumps(print))  # a global outside DCP metadata: refused, not called
@example(b"\x80\x05\x95")  # a torn pickle
def test_any_metadata_bytes(raw: bytes) -> None:
    _check_read(raw)


@given(st.one_of(json_values, st.fixed_dictionaries({"storage_data": storage_entries})))
def test_any_json_metadata(doc: object) -> None:
    raw = json.dumps(doc).encode()
    assume(raw.lstrip()[:1] == b"{")
    _check_read(raw)


real_files = st.dictionaries(
    st.from_regex(r"__[0-9]_0\.distcp", fullmatch=True),
    st.lists(
        st.tuples(st.from_regex(r"[a-z.]{1,8}", fullmatch=True), st.integers(0, 4096)),
        min_size=1,
        max_size=2,
    ),
    min_size=1,
    max_size=3,
)


@given(real_files, st.data())
def test_a_real_metadata_pickle_torn_or_flipped(
    files: dict[str, list[tuple[str, int]]], data: st.DataObject
) -> None:
    raw = dcp_metadata_bytes(files, Path("/ckpt/step-1"))
    _check_read(raw)  # whole: readable
    cut = data.draw(st.integers(0, len(raw) - 1), label="cut")
    _check_read(raw[:cut])  # a torn write
    at = data.draw(st.integers(0, len(raw) - 1), label="at")
    flipped = (
        raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255), label="xor")]) + raw[at + 1 :]
    )
    _check_read(flipped)


@given(st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
@example("²".encode())  # a digit to str.isdigit(), not to int()
@example(b"9" * 5000)  # past int()'s digit limit
@example(b"release\n")
@example(b"\xff")
def test_any_megatron_tracker(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / MEGATRON_TRACKER).write_bytes(raw)
        value = read_tracker(Path(tmp))
    assert value == "release" or value == "unreadable" or (isinstance(value, int) and value >= 0)


@given(
    st.dictionaries(shard_names, st.integers(0, 3000), max_size=3),
    st.one_of(
        st.none(),
        storage_entries.map(lambda s: json.dumps({"storage_data": s}).encode()),
        st.binary(max_size=64),
    ),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.sampled_from(["step-10", "iter_0000010", "release", "x"]),
)
@example(
    {"x\ny": 1},
    json.dumps({"storage_data": {"x\ny": {"offset": 0, "length": 8}}}).encode(),
    None,
    "step-1",
)
def test_any_checkpoint_directory(
    shards: dict[str, int], metadata: bytes | None, tracker: bytes | None, name: str
) -> None:
    """A directory with any shards, any ``.metadata`` and any tracker next to it: found,
    complete or not with a one-line reason."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        top = root / name
        top.mkdir()
        for rel, size in shards.items():
            path = top / rel
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"\0" * size)
            except (OSError, ValueError):
                continue  # not a name this filesystem holds
        if metadata is not None:
            (top / ".metadata").write_bytes(metadata)
        if tracker is not None:
            (root / MEGATRON_TRACKER).write_bytes(tracker)
        cp = inspect_checkpoint(top, now=NOW)
        found = discover(root, now=NOW)
    for c in (cp, *found):
        assert c.complete == (c.reason is None)
        for text in (c.reason, c.note):
            assert text is None or one_line(text), repr(text)
