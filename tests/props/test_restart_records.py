"""The restart recorder's persisted state and the attribution, under malformed input: the
state ConfigMap is JSON anyone with access can edit, and the logs and Events it reads are
free text. A pass never raises on them; what cannot be read is dropped, not fatal."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from krea_ops.controllers.restarts import RestartInputs, lemon_rows, record, run_restarts
from krea_ops.model import Severity
from krea_ops.training.attribution import (
    FailedPod,
    Restart,
    Signal,
    attribute,
    last_step,
    loaded_step,
)

T0 = 1_800_000_000.0
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(["signals", "gangs", "pending", "log", "attributed", "x"])


@given(st.dictionaries(KEYS, JSON, max_size=5))
def test_any_persisted_state_gives_a_pass_and_a_view(prev: dict[str, Any]) -> None:
    state, gauges = record(RestartInputs(), {}, [], T0, prev)
    json.dumps(state)  # what is persisted is JSON again
    assert gauges["restarts_pending"] >= 0
    run_restarts(prev, "training", "dit", 2)
    lemon_rows({"recorder": prev, "remediations": prev.get("x")}, [], T0)


SIGNALS = st.builds(
    Signal,
    node=st.sampled_from(["a", "b", "c", "z"]),
    code=st.sampled_from(["gpu_hot", "ib_link_downed", "gpu_warm", "exporter_down", "weird"]),
    severity=st.sampled_from(list(Severity)),
    message=st.text(max_size=20),
    first=st.floats(T0 - 5000, T0 + 5000),
    last=st.floats(T0 - 5000, T0 + 5000),
    gpu=st.none() | st.integers(0, 7),
    port=st.none() | st.text(max_size=6),
)
PODS = st.builds(
    FailedPod,
    pod=st.text(max_size=10),
    node=st.none() | st.sampled_from(["a", "b", "q"]),
    at=st.none() | st.floats(T0 - 100, T0 + 100),
    reason=st.none() | st.text(max_size=10),
    exit_code=st.none() | st.integers(-1, 255),
    message=st.none() | st.text(max_size=30),
    log_tail=st.lists(st.text(max_size=40), max_size=3).map(tuple),
)


@given(st.lists(SIGNALS, max_size=12), st.lists(PODS, max_size=3))
def test_attribution_is_a_gang_node_or_none_with_a_confidence_in_range(
    signals: list[Signal], pods: list[FailedPod]
) -> None:
    restart = Restart("training", "dit", 1, T0, ("a", "b", "c"), tuple(pods), 24)
    got = attribute(restart, signals)
    assert 0.0 <= got.confidence <= 1.0
    assert got.evidence and all(isinstance(e, str) for e in got.evidence)
    if got.attributed:
        assert got.node in {"a", "b", "c"} | {p.node for p in pods if p.node}
        assert got.cause not in ("unattributed", "systemic")
    else:
        assert got.cause in ("unattributed", "systemic") and got.confidence == 0.0


@given(st.lists(st.text(max_size=60), max_size=6))
def test_trainer_log_lines_give_a_step_or_none(lines: list[str]) -> None:
    for value in (last_step(lines), loaded_step(lines)):
        assert value is None or value >= 0
