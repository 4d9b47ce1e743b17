"""The goodput benchmark (benchmarks/bench_goodput.py), run short: the same seed gives the
same figures (in this process and in another), another seed other figures, and the JSON
has what a script checking the figures reads."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_goodput.py"
SHORT = ["--json", "--days", "1", "--nodes", "16"]
KEYS = {
    "regime",
    "ettr_without",
    "ettr_with",
    "restarts",
    "attributed_right",
    "attributed_wrong",
    "unattributed",
    "lemons_flagged",
    "lemons_true",
    "lost_hours_by_cause",
}
CAUSES = {"lost_work", "detection", "restart", "checkpoint_writes"}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_goodput", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run(bench: ModuleType, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert bench.main([*SHORT, *args]) == 0
    return capsys.readouterr().out


def objects(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_same_seed_same_figures_other_seed_other_figures(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(bench, capsys, "--seed", "5")
    assert run(bench, capsys, "--seed", "5") == first
    # another process, another hash seed: still the same figures
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    other_process = subprocess.run(
        [sys.executable, str(SCRIPT), *SHORT, "--seed", "5"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    ).stdout
    assert other_process == first
    assert run(bench, capsys, "--seed", "6") != first


def test_json_has_one_object_per_regime_with_the_figures(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    results = objects(run(bench, capsys, "--seed", "2"))
    assert [r["regime"] for r in results] == ["meta", "krea"]
    for r in results:
        assert set(r) >= KEYS, KEYS - set(r)
        for key in ("ettr_without", "ettr_with"):
            assert 0.0 < r[key] <= 1.0, (r["regime"], key, r[key])
        assert set(r["lost_hours_by_cause"]) == {"without", "with"}
        for run_name, lost in r["lost_hours_by_cause"].items():
            assert set(lost) == CAUSES
            # productive time plus the time lost by cause is the whole day
            ettr = r[f"ettr_{run_name}"]
            assert ettr * 24 + sum(lost.values()) == pytest.approx(24.0, abs=0.05)
        # every restart of the "with" run is judged once
        judged = r["attributed_right"] + r["attributed_wrong"] + r["unattributed"]
        assert judged == r["restarts"]["with"]
        assert r["lemons_true"] >= 0 and r["lemons_flagged"] >= 0


def test_table_without_json(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--days", "1", "--nodes", "16", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "ETTR" in out and "meta:" in out and "krea:" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--nodes", "0"], "--nodes"), (["--days", "soon"], "--days")],
)
def test_bad_input_is_one_line_and_exit_2(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert bench.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_several_seeds_summarised(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--days", "1", "--nodes", "16", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    for regime in ("meta", "krea"):
        assert f"{regime}: 2 seeds, 16 nodes" in out
    assert out.count("  with     ETTR ") == 2 and "attribution: right" in out
    assert "lemons: flagged" in out
