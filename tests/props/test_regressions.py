"""Each input the property tests of this directory found failing, as a plain test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from krea_ops.errors import BadInput
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.kube.cluster import node_info
from krea_ops.kube.quantity import QuantityError, format_quantity, number, parse_quantity
from krea_ops.kube.times import parse_time
from krea_ops.queue import _Raw, _snapshot, explain, parse_workload
from krea_ops.settings import Settings, load_settings
from krea_ops.training.checkpoints import (
    discover,
    inspect_checkpoint,
    read_dcp_metadata,
    read_tracker,
)


@pytest.mark.parametrize("text", ["1e99999999", "1e" + "9" * 5000, "2E-99999999"])
def test_an_exponent_out_of_range_is_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text)
    assert number(text) is None


def test_non_finite_floats_are_not_quantities() -> None:
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(QuantityError):
            parse_quantity(value)
        with pytest.raises(QuantityError):
            format_quantity(value)
        assert number(value) is None


def test_false_is_not_the_quantity_zero_even_after_zero() -> None:
    assert parse_quantity(0) == 0
    with pytest.raises(QuantityError):
        parse_quantity(False)


def test_unicode_digits_are_not_a_quantity() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("٣")


def test_a_timestamp_field_holding_a_list_is_no_time() -> None:
    assert parse_time(["2026-11-29T21:00:00Z"]) is None  # type: ignore[arg-type]


def _settings_file(tmp_path: Path, content: bytes) -> dict[str, str]:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    return {"KREA_OPS_CONFIG": str(path)}


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe max_share: 1",
        b"[" * 2000,
        b"exporter_fake_gpus: " + b"9" * 5000,
        b"exporter_fake_gpus: .inf",
        b"telemetry_window_s: " + b"1" + b"0" * 400,
        b"max_share: .nan",
    ],
    ids=["not-utf8", "deep", "huge-int", "int-inf", "float-overflow", "nan"],
)
def test_a_bad_settings_file_is_one_line(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(BadInput) as caught:
        load_settings(env=_settings_file(tmp_path, content))
    assert "\n" not in str(caught.value)


def test_nan_from_the_environment_is_refused() -> None:
    with pytest.raises(BadInput, match="max_share"):
        load_settings(env={"KREA_OPS_CONFIG": "/nonexistent", "KREA_OPS_MAX_SHARE": "nan"})


def test_a_setting_with_no_value_keeps_its_default(tmp_path: Path) -> None:
    settings = load_settings(env=_settings_file(tmp_path, b"max_share:\n"))
    assert settings.max_share == Settings().max_share


def test_json_metadata_nested_too_deep_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / ".metadata"
    path.write_bytes(b'{"a":' + b"[" * 100_000)
    read = read_dcp_metadata(path)
    assert read.required is None and read.error is not None and "not JSON" in read.error


def test_a_shard_name_with_a_newline_gives_a_one_line_reason(tmp_path: Path) -> None:
    top = tmp_path / "step-1"
    top.mkdir()
    (top / "x\ny").write_bytes(b"\0")
    meta = {"storage_data": {"x\ny": {"offset": 0, "length": 8}}}
    (top / ".metadata").write_text(json.dumps(meta))
    cp = inspect_checkpoint(top, now=2_000_000_000.0)
    assert not cp.complete
    assert cp.reason == "shard x\\ny is 1 bytes, metadata says at least 8"


@pytest.mark.parametrize("text", ["²", "9" * 5000])
def test_a_tracker_that_is_not_an_iteration_is_unreadable(tmp_path: Path, text: str) -> None:
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(text)
    assert read_tracker(tmp_path) == "unreadable"


def test_a_rate_file_past_float_range_is_a_read_error_not_inf(tmp_path: Path) -> None:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, text in (
        ("link_layer", "InfiniBand"),
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
    ):
        (port / name).write_text(text + "\n")
    (port / "rate").write_text("1e308 Gb/sec (4X HDR)\n")
    collector = InfinibandCollector(tmp_path, "n1")
    try:
        samples = {
            s.name: s.value
            for fam in collector.collect()
            for s in fam.samples
            if s.name != "krea_ib_read_errors_total"
        }
        errors = {
            s.labels["file"]: s.value
            for fam in collector.collect()
            for s in fam.samples
            if s.name == "krea_ib_read_errors_total"
        }
    finally:
        collector.close()
    assert "krea_ib_rate_bytes_per_second" not in samples
    assert samples["krea_ib_state_id"] == 4
    assert errors == {"mlx5_0/ports/1/rate": 2}  # once per scrape


def test_why_of_a_gang_of_two_billion_pods_answers() -> None:
    """A pod set's count is an int32: ``queue why`` once built a list of every pod."""
    gpus = {"nvidia.com/gpu": "8"}
    cq = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "h200",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}],
                        }
                    ]
                }
            ]
        },
    }
    lq = {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
    flavor = {"metadata": {"name": "h200"}}
    ready = [{"type": "Ready", "status": "True"}]
    node = node_info(
        {"metadata": {"name": "n1"}, "status": {"allocatable": gpus, "conditions": ready}}
    )
    snap = _snapshot(_Raw("v1beta2", [cq], [lq], {"h200": flavor}, [node]), None)
    pod_set = {
        "name": "main",
        "count": 2**31 - 1,
        "template": {"spec": {"containers": [{"resources": {"limits": gpus}}]}},
    }
    wl = parse_workload(
        {
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"queueName": "lq", "podSets": [pod_set]},
        },
        {("ns", "lq"): "cq"},
    )
    report = explain(wl, snap, {"h200": flavor}, [node], [])
    (fit,) = report.flavors
    assert fit.gang_gpu_pods == 2**31 - 1 and fit.pods_placeable_empty == 1
    assert "not enough healthy nodes to hold the gang" in report.summary


def test_a_checkpoint_path_with_a_newline_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as caught:
        discover(tmp_path / "run\nstep-1")
    assert str(caught.value) == f"{tmp_path}/run\\nstep-1: no such directory"


def test_a_prometheus_url_with_a_newline_is_refused_in_one_line() -> None:
    env = {"KREA_OPS_CONFIG": "/nonexistent", "KREA_OPS_PROMETHEUS_URL": "0\n0"}
    with pytest.raises(BadInput) as caught:
        load_settings(env=env)
    assert str(caught.value) == "KREA_OPS_PROMETHEUS_URL '0\\n0' has no scheme"
