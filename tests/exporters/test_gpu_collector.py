"""The GPU collector on a fake H200 node, read the way Prometheus reads it."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters import nvml as nvml_module
from krea_ops.exporters.fakenvml import FakeGpu, FakeNvml, fake_h200_node
from krea_ops.exporters.nvml import GpuCollector, NvmlUnavailable, error_kind, load_nvml
from tests.conftest import require_binary, wait_for

GPM_SERIES = (
    "krea_gpu_tensor_active_ratio",
    "krea_gpu_tensor_hmma_active_ratio",
    "krea_gpu_tensor_imma_active_ratio",
    "krea_gpu_tensor_dfma_active_ratio",
    "krea_gpu_sm_active_ratio",
    "krea_gpu_sm_occupancy_ratio",
)
READINGS = (
    "krea_gpu_temperature_celsius",
    "krea_gpu_memory_temperature_celsius",
    "krea_gpu_slowdown_margin_celsius",
    "krea_gpu_power_watts",
    "krea_gpu_sm_clock_hertz",
    "krea_gpu_utilization_ratio",
    "krea_gpu_memory_used_bytes",
    "krea_gpu_clock_event_active",
    "krea_gpu_clock_event_reasons",
    "krea_gpu_ecc_errors_total",
    "krea_gpu_remapped_rows_total",
    "krea_nvlink_state",
    "krea_nvlink_errors_total",
    *GPM_SERIES,
)


class Scrape:
    """One scrape of a collector, parsed back from the text exposition format."""

    def __init__(self, collector: GpuCollector) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self.text = generate_latest(registry).decode()
        self.samples = [
            (s.name, s.labels, s.value)
            for family in text_string_to_metric_families(self.text)
            for s in family.samples
        ]

    def values(self, name: str, **labels: str) -> list[float]:
        return [
            v
            for n, ls, v in self.samples
            if n == name and all(ls.get(k) == want for k, want in labels.items())
        ]

    def labelsets(self, name: str, **labels: str) -> list[dict[str, str]]:
        return [
            ls
            for n, ls, _ in self.samples
            if n == name and all(ls.get(k) == want for k, want in labels.items())
        ]

    def one(self, name: str, **labels: str) -> float:
        found = self.values(name, **labels)
        assert len(found) == 1, (name, labels, found)
        return found[0]

    def gpus_with(self, name: str) -> set[str]:
        return {ls["gpu"] for n, ls, _ in self.samples if n == name}

    def errors(self, gpu: str, kind: str) -> float:
        found = self.values("krea_gpu_nvml_errors_total", gpu=gpu, kind=kind)
        return found[0] if found else 0.0


@pytest.fixture
def node() -> FakeNvml:
    fake = fake_h200_node(count=8, seed=1)
    fake.nvmlInit()
    return fake


@pytest.fixture
def make_collector(node: FakeNvml) -> Iterator[Callable[..., GpuCollector]]:
    made: list[GpuCollector] = []

    def make(nvml: Any = None, **kwargs: Any) -> GpuCollector:
        kwargs.setdefault("gpm_interval_s", 0.02)
        kwargs.setdefault("event_wait_ms", 20)
        collector = GpuCollector(node if nvml is None else nvml, "n1", **kwargs)
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()


def started(collector: GpuCollector) -> GpuCollector:
    """Start the collector's GPM and XID threads; return it."""
    collector.start()
    return collector


def wait_for_gpm(collector: GpuCollector, gpus: int = 8) -> Scrape:
    """Poll (bounded) until ``gpus`` GPUs have a tensor-activity series; return that scrape."""
    return wait_for(
        lambda: (
            (s := Scrape(collector)) and len(s.values("krea_gpu_tensor_active_ratio")) == gpus and s
        ),
        timeout=10,
        interval=0.01,
    )


# -- a healthy node -------------------------------------------------------------------------


def test_healthy_h200_node_in_base_units_with_identity_labels(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = started(make_collector())
    s = wait_for_gpm(collector)
    assert s.values("krea_gpu_up") == [1.0] * 8
    for i, gpu in enumerate(node.gpus):
        g = str(i)
        (labels,) = s.labelsets("krea_gpu_up", gpu=g)
        assert labels == {
            "node": "n1",
            "gpu": g,
            "uuid": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "model": "NVIDIA H200",
        }
        assert s.one("krea_gpu_power_watts", gpu=g) == pytest.approx(gpu.power_w, abs=0.001)
        assert s.one("krea_gpu_power_limit_watts", gpu=g) == 700.0
        assert s.one("krea_gpu_temperature_celsius", gpu=g) == gpu.temperature_c
        assert s.one("krea_gpu_memory_temperature_celsius", gpu=g) == gpu.memory_temperature_c
        assert s.one("krea_gpu_slowdown_temperature_celsius", gpu=g) == 89
        assert s.one("krea_gpu_shutdown_temperature_celsius", gpu=g) == 92
        assert s.one("krea_gpu_slowdown_margin_celsius", gpu=g) == 89 - gpu.temperature_c
        assert s.one("krea_gpu_sm_clock_hertz", gpu=g) == gpu.sm_clock_mhz * 1_000_000
        assert s.one("krea_gpu_memory_clock_hertz", gpu=g) == 3_201_000_000
        assert s.one("krea_gpu_utilization_ratio", gpu=g) == 1.0
        assert s.one("krea_gpu_memory_used_bytes", gpu=g) == gpu.memory_used_bytes
        assert s.one("krea_gpu_memory_total_bytes", gpu=g) == 150_754_820_096
        assert s.one("krea_gpu_energy_joules_total", gpu=g) > 1_000_000
        assert s.one("krea_gpu_tensor_active_ratio", gpu=g) == pytest.approx(gpu.tensor_active)
        assert s.one("krea_gpu_sm_active_ratio", gpu=g) == pytest.approx(gpu.sm_active)
        assert 0.0 < s.one("krea_gpu_gpm_window_seconds", gpu=g) < 5.0
        assert s.values("krea_nvlink_state", gpu=g) == [1.0] * 18
        assert s.values("krea_nvlink_errors_total", gpu=g) == [0.0] * 18 * 4
        assert s.values("krea_gpu_ecc_errors_total", gpu=g) == [0.0] * 4
        assert s.values("krea_gpu_clock_event_active", gpu=g) == [0.0] * 9
        assert s.one("krea_gpu_row_remap_pending", gpu=g) == 0.0
        assert s.one("krea_gpu_xid_monitored", gpu=g) == 1.0
    for name, _, value in s.samples:
        if name.endswith("_ratio"):
            assert 0.0 <= value <= 1.0, name
    assert s.values("krea_gpu_nvml_errors_total") == []
    (driver,) = s.labelsets("krea_gpu_driver_info")
    assert driver["driver_version"] == node.driver_version


def test_input_bound_gpu_is_busy_but_its_tensor_cores_are_idle(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[3].update(util_percent=100, tensor_active=0.05, hmma_active=0.05, sm_active=0.2)
    node.gpus[4].update(util_percent=100, tensor_active=0.62, hmma_active=0.60)
    s = wait_for_gpm(started(make_collector()))
    assert s.one("krea_gpu_utilization_ratio", gpu="3") == 1.0
    assert s.one("krea_gpu_utilization_ratio", gpu="4") == 1.0
    assert s.one("krea_gpu_tensor_active_ratio", gpu="3") == pytest.approx(0.05)
    assert s.one("krea_gpu_tensor_active_ratio", gpu="4") == pytest.approx(0.62)
    assert s.one("krea_gpu_sm_active_ratio", gpu="3") == pytest.approx(0.2)


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "kind"), [("lost", "gpu_is_lost"), ("reset_required", "reset_required")]
)
def test_lost_or_reset_gpu_is_down_with_its_labels_and_the_rest_intact(
    node, make_collector, state, kind
) -> None:  # type: ignore[no-untyped-def]
    collector = started(make_collector())
    wait_for_gpm(collector)
    node.inject_xid(2, 79)
    wait_for(lambda: Scrape(collector).values("krea_gpu_xid_last", gpu="2") == [79.0])
    setattr(node.gpus[2], state, True)

    s = Scrape(collector)
    assert s.one("krea_gpu_up", gpu="2") == 0.0
    (labels,) = s.labelsets("krea_gpu_up", gpu="2")
    assert labels["uuid"] == node.gpus[2].uuid  # identity cached at start
    assert labels["pci_bus_id"] == node.gpus[2].pci_bus_id
    assert s.one("krea_gpu_down_info", gpu="2", reason=kind) == 1.0
    for name in READINGS:
        assert "2" not in s.gpus_with(name), name
        assert s.gpus_with(name) == {"0", "1", "3", "4", "5", "6", "7"}, name
    assert s.values("krea_gpu_up") == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    first = s.errors("2", kind)
    assert first >= 1
    # The XID history stays: XID 79 is how a GPU falling off the bus is announced.
    assert s.one("krea_gpu_xid_errors_total", gpu="2", xid="79") == 1.0
    # The error count persists and grows with every scrape that finds the GPU down.
    assert Scrape(collector).errors("2", kind) > first


def test_gpu_lost_before_the_first_scrape_is_down_with_its_index(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[5].lost = True
    s = Scrape(make_collector())
    (labels,) = s.labelsets("krea_gpu_up", gpu="5")
    assert s.one("krea_gpu_up", gpu="5") == 0.0
    assert labels["uuid"] == ""  # never identified
    assert s.errors("5", "gpu_is_lost") == 1.0
    assert len(s.values("krea_gpu_up")) == 8


def test_not_supported_series_are_absent_not_zero_and_counted_once(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[1].memory_temperature_c = None  # no HBM sensor
    node.gpus[4].unsupported.add("nvmlDeviceGetTotalEccErrors")
    node.gpus[5].unsupported.add(
        ("nvmlDeviceGetNvLinkErrorCounter", 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
    )
    collector = make_collector()
    s = Scrape(collector)
    assert s.values("krea_gpu_memory_temperature_celsius", gpu="1") == []
    assert len(s.values("krea_gpu_memory_temperature_celsius")) == 7
    assert s.values("krea_gpu_ecc_errors_total", gpu="4") == []
    assert len(s.values("krea_gpu_ecc_errors_total", gpu="5")) == 4
    assert s.values("krea_nvlink_errors_total", gpu="5", link="7", counter="crc_data") == []
    assert len(s.values("krea_nvlink_errors_total", gpu="5", link="7")) == 3
    assert len(s.values("krea_nvlink_errors_total", gpu="5")) == 18 * 4 - 1
    assert s.values("krea_gpu_up") == [1.0] * 8
    assert s.errors("1", "not_supported") == 1.0
    assert s.errors("4", "not_supported") == 4.0  # four ECC counters asked once each
    assert s.errors("5", "not_supported") == 1.0
    again = Scrape(collector)
    assert again.errors("4", "not_supported") == 4.0  # not asked again
    assert node.calls["nvmlDeviceGetTotalEccErrors"] == 2 * 7 * 4 + 4


def test_gpu_without_gpm_has_no_tensor_series(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[6].gpm_supported = False  # e.g. an A100
    collector = started(make_collector())
    s = wait_for_gpm(collector, gpus=7)
    assert "6" not in s.gpus_with("krea_gpu_tensor_active_ratio")
    for name in (*GPM_SERIES, "krea_gpu_gpm_sample_timestamp_seconds"):
        assert s.values(name, gpu="6") == [], name
    assert s.one("krea_gpu_up", gpu="6") == 1.0
    assert node.calls["nvmlGpmSampleGet"] > 0


def test_clock_event_bitmask_is_decoded_one_series_per_reason(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[0].clock_event_reasons = 0x60
    node.gpus[1].clock_event_reasons = (
        pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    )
    s = Scrape(make_collector())
    active0 = {ls["reason"] for ls in s.labelsets("krea_gpu_clock_event_active", gpu="0")}
    assert active0 == {
        "sw_thermal",
        "hw_thermal",
        "hw_slowdown",
        "sw_power_cap",
        "hw_power_brake",
        "gpu_idle",
        "sync_boost",
        "applications_clocks_setting",
        "display_clock_setting",
    }
    on = {
        g: {
            ls["reason"]
            for n, ls, v in s.samples
            if n == "krea_gpu_clock_event_active" and ls["gpu"] == g and v == 1.0
        }
        for g in ("0", "1", "2")
    }
    assert on == {
        "0": {"sw_thermal", "hw_thermal"},
        "1": {"sw_power_cap", "hw_power_brake"},
        "2": set(),
    }
    # the same reasons as one bitmask per GPU, which fleet-wide reads use
    assert s.one("krea_gpu_clock_event_reasons", gpu="0") == 0x60
    assert s.one("krea_gpu_clock_event_reasons", gpu="1") == float(
        pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    )
    assert s.one("krea_gpu_clock_event_reasons", gpu="2") == 0.0


def test_unknown_nvml_error_costs_one_series_for_one_scrape(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = make_collector()
    node.fail_next("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, gpu_index=1)
    s = Scrape(collector)
    assert s.values("krea_gpu_power_watts", gpu="1") == []
    assert s.one("krea_gpu_up", gpu="1") == 1.0
    assert s.one("krea_gpu_temperature_celsius", gpu="1") > 0
    assert s.errors("1", "unknown") == 1.0
    s2 = Scrape(collector)
    assert len(s2.values("krea_gpu_power_watts", gpu="1")) == 1
    assert s2.errors("1", "unknown") == 1.0


def test_unexpected_exception_costs_one_gpu_and_collect_never_raises(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    real = node.nvmlDeviceGetRemappedRows
    bad = node.handle(6)

    def flaky(device):  # type: ignore[no-untyped-def]
        if node._index_of(device) == node._index_of(bad):
            raise RuntimeError("driver returned garbage")
        return real(device)

    node.nvmlDeviceGetRemappedRows = flaky
    s = Scrape(make_collector())
    assert s.one("krea_gpu_up", gpu="6") == 0.0
    assert s.one("krea_gpu_down_info", gpu="6", reason="unexpected") == 1.0
    assert s.values("krea_gpu_temperature_celsius", gpu="6") == []
    assert len(s.values("krea_gpu_temperature_celsius")) == 7
    assert s.errors("6", "unexpected") == 1.0


def test_old_driver_falls_back_to_deprecated_calls_and_computed_margin(
    node, make_collector
) -> None:  # type: ignore[no-untyped-def]
    node.missing_functions |= {
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetMarginTemperature",
    }
    node.gpus[0].update(temperature_c=80, clock_event_reasons=0x20)
    s = Scrape(make_collector())
    assert s.one("krea_gpu_temperature_celsius", gpu="0") == 80
    assert s.one("krea_gpu_slowdown_margin_celsius", gpu="0") == 89 - 80
    assert s.one("krea_gpu_clock_event_active", gpu="0", reason="sw_thermal") == 1.0
    assert s.errors("0", "function_not_found") == 1.0  # the margin, once


# -- XID ----------------------------------------------------------------------------------------


def test_xid_counts_per_code_and_last_xid_expires_after_the_window(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = started(make_collector(xid_window_s=0.3))
    assert node.inject_xid(4, 79) == 1

    s = wait_for(
        lambda: (x := Scrape(collector)).values("krea_gpu_xid_errors_total", gpu="4") and x,
        timeout=5,
        interval=0.01,
    )
    assert s.one("krea_gpu_xid_errors_total", gpu="4", xid="79") == 1.0
    assert s.one("krea_gpu_xid_last", gpu="4") == 79.0
    assert s.one("krea_gpu_xid_last_timestamp_seconds", gpu="4") > 1.7e9
    assert s.values("krea_gpu_xid_errors_total", gpu="3") == []

    node.inject_xid(4, 79)
    node.inject_xid(4, 13)
    s = wait_for(
        lambda: (
            (x := Scrape(collector)).values("krea_gpu_xid_errors_total", gpu="4", xid="13") and x
        ),
        timeout=5,
        interval=0.01,
    )
    assert s.one("krea_gpu_xid_errors_total", gpu="4", xid="79") == 2.0
    # Never "last XID forever": it disappears once the window has passed...
    s = wait_for(
        lambda: (x := Scrape(collector)).values("krea_gpu_xid_last", gpu="4") == [] and x,
        timeout=5,
        interval=0.05,
    )
    # ... while the counts and the time of the last one stay.
    assert s.one("krea_gpu_xid_errors_total", gpu="4", xid="79") == 2.0
    assert s.one("krea_gpu_xid_errors_total", gpu="4", xid="13") == 1.0
    assert len(s.values("krea_gpu_xid_last_timestamp_seconds", gpu="4")) == 1


def test_gpu_that_cannot_register_for_xid_says_it_is_not_monitored(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[7].unsupported.add("nvmlDeviceRegisterEvents")
    collector = started(make_collector())
    s = Scrape(collector)
    assert s.one("krea_gpu_xid_monitored", gpu="7") == 0.0
    assert s.one("krea_gpu_xid_monitored", gpu="0") == 1.0
    assert s.errors("7", "not_supported") == 1.0


# -- NVLink ---------------------------------------------------------------------------------------


def test_nvlink_errors_come_from_per_link_counters(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    link = node.gpus[0].nvlinks[5]
    link.replay, link.crc_flit, link.recovery = 3, 7, 1
    node.gpus[0].nvlinks[11].active = False
    s = Scrape(make_collector())
    per_link = {
        ls["counter"]: v
        for ls, v in zip(
            s.labelsets("krea_nvlink_errors_total", gpu="0", link="5"),
            s.values("krea_nvlink_errors_total", gpu="0", link="5"),
            strict=True,
        )
    }
    assert per_link == {"replay": 3.0, "recovery": 1.0, "crc_flit": 7.0, "crc_data": 0.0}
    assert s.one("krea_nvlink_state", gpu="0", link="11") == 0.0
    assert sum(s.values("krea_nvlink_state", gpu="0")) == 17


def test_per_gpu_nvlink_sums_add_up_the_links(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    node.gpus[0].nvlinks[5].replay = 3
    node.gpus[0].nvlinks[9].replay = 4
    node.gpus[0].nvlinks[9].crc_flit = 2
    node.gpus[0].nvlinks[11].active = False
    node.gpus[5].unsupported.add(
        ("nvmlDeviceGetNvLinkErrorCounter", 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
    )
    s = Scrape(make_collector())
    sums = {
        ls["counter"]: v
        for ls, v in zip(
            s.labelsets("krea_gpu_nvlink_errors_total", gpu="0"),
            s.values("krea_gpu_nvlink_errors_total", gpu="0"),
            strict=True,
        )
    }
    assert sums == {"replay": 7.0, "recovery": 0.0, "crc_flit": 2.0, "crc_data": 0.0}
    assert s.one("krea_gpu_nvlink_links", gpu="0") == 18
    assert s.one("krea_gpu_nvlink_links_up", gpu="0") == 17
    assert s.one("krea_gpu_nvlink_links_up", gpu="1") == 18
    # a counter one link does not support: the sum of the other 17, every scrape alike
    assert s.one("krea_gpu_nvlink_errors_total", gpu="5", counter="crc_data") == 0.0
    assert len(s.values("krea_gpu_nvlink_errors_total")) == 8 * 4
    again = Scrape(make_collector())
    assert again.one("krea_gpu_nvlink_errors_total", gpu="0", counter="replay") == 7


def test_link_discovery_happens_once_not_every_scrape(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = make_collector()
    Scrape(collector)
    after_first = node.calls["nvmlDeviceGetNvLinkState"]
    assert after_first == 8 * (36 + 18)  # one probe of all NVML_NVLINK_MAX_LINKS, one read
    Scrape(collector)
    assert node.calls["nvmlDeviceGetNvLinkState"] - after_first == 8 * 18


# -- threads and lifecycle ------------------------------------------------------------------------


def test_gpm_values_come_from_the_background_sampler_not_the_scrape(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = make_collector(gpm_interval_s=0.02)
    for _ in range(3):
        s = Scrape(collector)
        assert s.values("krea_gpu_tensor_active_ratio") == []
    assert node.calls["nvmlGpmSampleGet"] == 0  # a scrape never samples (or sleeps)

    collector.start()
    s = wait_for_gpm(collector)
    assert s.one("krea_gpu_tensor_active_ratio", gpu="2") == pytest.approx(
        node.gpus[2].tensor_active
    )
    # A new rate shows up once the sampler has a sample pair taken after the change.
    node.gpus[2].update(tensor_active=0.9, hmma_active=0.9)
    wait_for(
        lambda: (
            Scrape(collector).one("krea_gpu_tensor_active_ratio", gpu="2") == pytest.approx(0.9)
        ),
        timeout=5,
        interval=0.01,
    )
    assert node.live_gpm_samples <= 8  # one kept per GPU; the older one is freed


def test_close_stops_threads_frees_samples_and_event_set_and_shuts_nvml_down(node) -> None:  # type: ignore[no-untyped-def]
    collector = GpuCollector(node, "n1", gpm_interval_s=0.02, event_wait_ms=20)
    collector.start()
    wait_for_gpm(collector)
    names = {t.name for t in threading.enumerate()}
    assert {"krea-gpu-gpm", "krea-gpu-xid"} <= names
    collector.close()
    names = {t.name for t in threading.enumerate()}
    assert not names & {"krea-gpu-gpm", "krea-gpu-xid"}
    assert node.live_gpm_samples == 0
    assert node.live_event_sets == 0
    assert not node.initialized
    collector.close()  # twice is harmless
    assert list(collector.collect()) == []


def test_concurrent_scrapes_with_background_threads(node, make_collector) -> None:  # type: ignore[no-untyped-def]
    collector = started(make_collector())
    failures: list[BaseException] = []
    ups: list[int] = []

    def scrape_many() -> None:
        try:
            for _ in range(5):
                ups.append(len(Scrape(collector).values("krea_gpu_up")))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=scrape_many) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(10):
        node.inject_xid(i % 8, 31)
    for t in threads:
        t.join(timeout=30)
    assert not failures
    assert ups == [8] * 20


def test_empty_node_and_failing_device_count(make_collector) -> None:  # type: ignore[no-untyped-def]
    empty = FakeNvml([])
    empty.nvmlInit()
    collector = make_collector(empty)
    collector.start()
    s = Scrape(collector)
    assert s.values("krea_gpu_up") == []

    broken = FakeNvml([FakeGpu()])
    broken.nvmlInit()
    broken.fail_next("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN)
    collector = make_collector(broken)
    assert Scrape(collector).errors("", "unknown") == 1.0
    assert Scrape(collector).values("krea_gpu_up") == [1.0]  # asked again next scrape


# -- loading NVML, naming, exposition ---------------------------------------------------


def test_load_nvml_without_a_driver_raises_one_line_reason() -> None:
    try:
        module = load_nvml()
    except NvmlUnavailable as exc:
        reason = str(exc)
        assert reason and "\n" not in reason
        assert "libnvidia-ml.so.1" in reason
        return
    module.nvmlShutdown()  # pragma: no cover - only on a machine with a GPU
    pytest.skip("this machine has an NVIDIA driver")  # pragma: no cover


def test_error_kinds_are_snake_case_of_the_pynvml_class() -> None:
    assert error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "gpu_is_lost"
    assert error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == "not_supported"
    assert error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_RESET_REQUIRED)) == "reset_required"
    assert error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)) == "unknown"
    assert (
        error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
        == "lib_rm_version_mismatch"
    )
    assert error_kind(ValueError("x")) == "unexpected"


def test_the_collector_constants_match_pynvml() -> None:
    assert nvml_module.FI_DEV_MEMORY_TEMP == pynvml.NVML_FI_DEV_MEMORY_TEMP
    assert pynvml.nvmlEventTypeXidCriticalError == nvml_module.EVENT_XID
    assert dict(nvml_module.CLOCK_EVENT_REASONS)["hw_thermal"] == (
        pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    assert dict(nvml_module.NVLINK_COUNTERS)["crc_data"] == pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA
    assert dict((n, m) for m, n in nvml_module.GPM_METRICS)[
        "krea_gpu_tensor_hmma_active_ratio"
    ] == (pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL)
    for name in nvml_module.NVML_FUNCTIONS:
        assert callable(getattr(pynvml, name)), name


def test_promtool_accepts_a_full_scrape(node, make_collector, tmp_path) -> None:  # type: ignore[no-untyped-def]
    promtool = require_binary("promtool")
    node.gpus[1].memory_temperature_c = None
    node.gpus[6].gpm_supported = False
    node.gpus[0].clock_event_reasons = 0x60
    node.gpus[0].nvlinks[2].replay = 4
    collector = started(make_collector())
    wait_for_gpm(collector, gpus=7)
    node.inject_xid(3, 79)
    wait_for(lambda: Scrape(collector).values("krea_gpu_xid_last", gpu="3"), timeout=5)
    node.gpus[5].lost = True
    text = Scrape(collector).text
    for name in ("krea_gpu_down_info", "krea_gpu_xid_errors_total", "krea_gpu_nvml_errors_total"):
        assert name in text
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
