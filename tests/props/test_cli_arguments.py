"""CLI arguments (commands/): any value for a flag or an argument gives exit 0, 1 (the
part it needs is missing) or 2 (bad input) with one error line, never a traceback or an
"unexpected" error, and nothing is written: the cluster commands point at a kubeconfig
whose API server does not answer, the write commands run with --dry-run."""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commands.main import invoke
from tests.props.conftest import one_line

UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""

NO_NUL = st.characters(exclude_characters="\x00")  # argv cannot hold NUL
numbers = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "-1", "0", "1e999", "0x10", "1_0", "", " ", "1.5", "10%", "٣"]
    ),
    st.floats().map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.text(NO_NUL, max_size=8),
)
words = st.one_of(
    st.sampled_from(
        ["", "-", "--", "a=b", "a in (b)", "!a", "a,b", "=", "a==b,,", "gpu-node-001", "x" * 300]
    ),
    st.text(NO_NUL, max_size=12),
)


@pytest.fixture(scope="module")
def environment() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "kubeconfig").write_text(UNREACHABLE)
        saved = {
            k: os.environ.get(k)
            for k in ("KREA_OPS_CONFIG", "KREA_OPS_AUDIT_LOG", "KUBECONFIG", "KREA_OPS_KUBECONFIG")
        }
        os.environ.update(
            KREA_OPS_CONFIG=str(root / "no-config.yaml"),
            KREA_OPS_AUDIT_LOG=str(root / "audit.jsonl"),
            KUBECONFIG=str(root / "kubeconfig"),
            KREA_OPS_KUBECONFIG=str(root / "kubeconfig"),
        )
        try:
            yield root
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = invoke(args)
    return code, err.getvalue()


def check(environment: Path, args: list[str], allowed: tuple[int, ...] = (0, 1, 2)) -> int:
    code, err = run(args)
    assert code in allowed, (args, code, err)
    assert "unexpected" not in err and "Traceback" not in err, (args, err)
    if code:
        assert one_line(err.rstrip("\n")), (args, err)
    assert not (environment / "audit.jsonl").exists(), "a dry run or a refused command wrote"
    return code


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


@settings(max_examples=40)
@given(
    st.sampled_from(
        [
            "--checkpoint-seconds",
            "--mtbf-hours",
            "--nodes",
            "--failures-per-1000-node-days",
            "--restart-minutes",
            "--current-interval-minutes",
        ]
    ),
    numbers,
)
@example("--checkpoint-seconds", "nan")
@example("--mtbf-hours", "inf")
@example("--nodes", "-1")
def test_train_advise_any_number(environment: Path, flag: str, value: str) -> None:
    code = check(environment, ["train", "advise", flag, value])
    if not is_number(value):
        assert code == 2, (flag, value)


@settings(max_examples=40)
@given(numbers, numbers, words)
@example("nan", "300", "gpu-node-001")
@example("0.1", "inf", "gpu-node-001")
@example("2", "-5", "gpu-node-001")
def test_nodes_evict_any_share_timeout_and_name(
    environment: Path, share: str, timeout: str, node: str
) -> None:
    args = [
        "nodes",
        "evict",
        node,
        "--reason",
        "test",
        "--max-share",
        share,
        "--timeout",
        timeout,
        "--dry-run",
    ]
    code = check(environment, args, (1, 2))
    if not is_number(timeout) and timeout.strip().lower().lstrip("+") not in ("inf", "infinity"):
        assert code == 2, (share, timeout)  # --timeout inf: wait as long as it takes


@settings(max_examples=40)
@given(words, numbers)
@example("a in (b", "1")
@example("gpu-node-001", "-3")
def test_selectors_and_counts(environment: Path, selector: str, count: str) -> None:
    check(environment, ["gpus", "-l", selector], (1, 2))
    code = check(
        environment,
        ["burst", "migrate", "--back", "--selector", selector, "--max", count, "--dry-run"],
        (1, 2),
    )
    try:
        int(count)
    except ValueError:
        assert code == 2


@settings(max_examples=40)
@given(words)
@example("~nobody/x")
@example("/proc/self/mem")
def test_train_checkpoints_any_path(environment: Path, path: str) -> None:
    check(environment, ["train", "checkpoints", path], (0, 2))
