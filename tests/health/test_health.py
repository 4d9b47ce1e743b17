"""The health policy on snapshots built by hand: each rule fires on what an operator would
call a problem, with the numbers in the sentence, and never calls missing data healthy."""

from __future__ import annotations

from krea_ops.health import HealthPolicy, fleet_views, gpu_verdict, node_verdict
from krea_ops.model import (
    FleetTelemetry,
    GpuSample,
    IbPortSample,
    NodeInfo,
    NodeTelemetry,
    NvLinkSample,
    Severity,
    Taint,
)

P = HealthPolicy(window_s=300)


def gpu(**kw) -> GpuSample:  # type: ignore[no-untyped-def]
    base = dict(
        node="n1",
        index=0,
        up=True,
        temperature_c=60.0,
        temperature_min_window_c=58.0,
        slowdown_margin_c=25.0,
        clock_events=frozenset(),
        xid_increase={},
        nvlink_error_increase={"replay": 0.0, "recovery": 0.0, "crc_flit": 0.0, "crc_data": 0.0},
    )
    base.update(kw)
    return GpuSample(**base)  # type: ignore[arg-type]


def node(**kw) -> NodeInfo:  # type: ignore[no-untyped-def]
    base = dict(name="n1", ready=True, gpu_capacity=8, gpu_allocatable=8)
    base.update(kw)
    return NodeInfo(**base)  # type: ignore[arg-type]


def codes(v) -> set[str]:  # type: ignore[no-untyped-def]
    return {r.code for r in v.reasons}


def test_a_cool_idle_gpu_is_ok() -> None:
    v = gpu_verdict(gpu(), P)
    assert v.severity is Severity.OK and v.reasons == ()


def test_hot_for_the_whole_window_is_bad_and_says_how_hot() -> None:
    v = gpu_verdict(gpu(temperature_c=81.4, temperature_min_window_c=79.0), P)
    assert v.severity is Severity.BAD
    assert "81 °C" in v.summary and "78 °C" in v.summary and "5 min" in v.summary


def test_a_spike_above_78_is_only_suspect() -> None:
    v = gpu_verdict(gpu(temperature_c=79.0, temperature_min_window_c=70.0), P)
    assert v.severity is Severity.SUSPECT and codes(v) == {"gpu_hot_transient"}


def test_threshold_comes_from_the_policy() -> None:
    strict = HealthPolicy(hot_c=70.0, warm_c=65.0)
    assert (
        gpu_verdict(gpu(temperature_c=72.0, temperature_min_window_c=71.0), strict).severity
        is Severity.BAD
    )
    assert (
        gpu_verdict(gpu(temperature_c=72.0, temperature_min_window_c=71.0), P).severity
        is Severity.OK
    )


def test_thermal_slowdown_and_power_brake_are_bad_but_power_cap_is_not() -> None:
    assert gpu_verdict(gpu(clock_events=frozenset({"sw_power_cap"})), P).severity is Severity.OK
    v = gpu_verdict(gpu(clock_events=frozenset({"hw_thermal", "hw_power_brake"})), P)
    assert v.severity is Severity.BAD and codes(v) == {"gpu_hw_thermal", "gpu_hw_power_brake"}


def test_low_slowdown_margin() -> None:
    assert gpu_verdict(gpu(slowdown_margin_c=3.0), P).severity is Severity.SUSPECT
    assert gpu_verdict(gpu(slowdown_margin_c=0.0), P).severity is Severity.BAD


def test_xid_classes() -> None:
    assert codes(gpu_verdict(gpu(xid_increase={79: 1.0}), P)) == {"xid_bus"}
    assert gpu_verdict(gpu(xid_increase={79: 1.0}), P).severity is Severity.BAD
    assert gpu_verdict(gpu(xid_increase={48: 2.0}), P).severity is Severity.BAD
    assert gpu_verdict(gpu(xid_increase={74: 1.0}), P).severity is Severity.BAD
    app = gpu_verdict(gpu(xid_increase={13: 3.0}), P)
    assert (
        app.severity is Severity.SUSPECT
        and "usually the job" in app.summary
        and "3x" in app.summary
    )
    # a count of zero in the window is no event; the last-XID gauge alone still counts
    assert gpu_verdict(gpu(xid_increase={79: 0.0}), P).severity is Severity.OK
    assert gpu_verdict(gpu(xid_increase=None, xid_last=79), P).severity is Severity.BAD


def test_lost_gpu_is_bad_and_names_why() -> None:
    v = gpu_verdict(gpu(up=False, down_reason="gpu_is_lost", temperature_c=None), P)
    assert v.severity is Severity.BAD and "gpu is lost" in v.summary


def test_nvlink_errors_scale_from_suspect_to_bad() -> None:
    few = gpu(nvlink_error_increase={"recovery": 2.0, "crc_flit": 1.0, "replay": 500.0})
    many = gpu(nvlink_error_increase={"crc_data": 150.0})
    assert (
        gpu_verdict(few, P).severity is Severity.SUSPECT
        and "3 NVLink" in gpu_verdict(few, P).summary
    )
    assert gpu_verdict(many, P).severity is Severity.BAD
    # replays alone are the link doing its job
    assert gpu_verdict(gpu(nvlink_error_increase={"replay": 1e6}), P).severity is Severity.OK


def test_ib_link_down_flap_and_errors() -> None:
    base = dict(node="n1", device="mlx5_0", port="1", state="ACTIVE", phys_state="LinkUp")
    ok = IbPortSample(**base, error_increase={"symbol_error": 0.0, "link_downed": 0.0})  # type: ignore[arg-type]
    flap = IbPortSample(**base, error_increase={"link_downed": 1.0})  # type: ignore[arg-type]
    sym = IbPortSample(**base, error_increase={"symbol_error": 12.0})  # type: ignore[arg-type]
    many = IbPortSample(**base, error_increase={"port_rcv_errors": 400.0})  # type: ignore[arg-type]
    down = IbPortSample(**{**base, "state": "DOWN", "phys_state": "Polling"})  # type: ignore[arg-type]
    sat = IbPortSample(**base, saturated=frozenset({"symbol_error"}))  # type: ignore[arg-type]

    def verdict(p: IbPortSample):  # type: ignore[no-untyped-def]
        return node_verdict(node(), NodeTelemetry(node="n1", exporter_up=True, ib_ports=(p,)), P)

    assert verdict(ok).severity is Severity.OK
    assert (
        verdict(flap).severity is Severity.BAD
        and "mlx5_0/1 link went down 1x" in verdict(flap).summary
    )
    assert verdict(sym).severity is Severity.SUSPECT and "12 link errors" in verdict(sym).summary
    assert verdict(many).severity is Severity.BAD
    assert verdict(down).severity is Severity.BAD and "DOWN" in verdict(down).summary
    assert verdict(sat).severity is Severity.SUSPECT and "perfquery" in verdict(sat).summary


def test_congestion_is_suspect_not_bad() -> None:
    # 50 GB/s link, 2.5e9 ticks/s x 8 B = 20 GB/s lost = 40 %
    p = IbPortSample(
        node="n1",
        device="mlx5_0",
        port="1",
        state="ACTIVE",
        rate_bytes_per_s=5e10,
        xmit_wait_per_s=2.5e9,
    )
    v = node_verdict(node(), NodeTelemetry(node="n1", exporter_up=True, ib_ports=(p,)), P)
    assert v.severity is Severity.SUSPECT and "40%" in v.summary


def test_nvlink_link_down_only_matters_when_its_siblings_are_up() -> None:
    links = (
        NvLinkSample(node="n1", gpu=0, link=0, up=True),
        NvLinkSample(node="n1", gpu=0, link=1, up=False),
    )
    v = node_verdict(node(), NodeTelemetry(node="n1", exporter_up=True, nvlinks=links), P)
    assert v.severity is Severity.BAD and "gpu0/link1" in v.summary
    all_down = tuple(NvLinkSample(node="n1", gpu=0, link=i, up=False) for i in range(2))
    # a GPU with no NVLink at all (PCIe card) is not a fault
    assert (
        node_verdict(
            node(), NodeTelemetry(node="n1", exporter_up=True, nvlinks=all_down), P
        ).severity
        is Severity.OK
    )


def test_missing_stale_or_down_telemetry_is_unknown_never_ok() -> None:
    assert node_verdict(node(), None, P).severity is Severity.UNKNOWN
    down = NodeTelemetry(node="n1", exporter_up=False, error="connection refused")
    v = node_verdict(node(), down, P)
    assert v.severity is Severity.UNKNOWN and "connection refused" in v.summary
    stale = NodeTelemetry(node="n1", exporter_up=True, stale=True, age_s=312.0)
    v = node_verdict(node(), stale, P)
    assert v.severity is Severity.UNKNOWN and "last sample 5m12s ago" in v.summary
    # nodes without GPUs and virtual nodes are not expected to have an exporter
    assert node_verdict(node(gpu_capacity=None), None, P).severity is Severity.OK
    assert node_verdict(node(virtual=True, ready=True), None, P).severity is Severity.OK


def test_node_conditions() -> None:
    tel = NodeTelemetry(node="n1", exporter_up=True, gpus=tuple(gpu(index=i) for i in range(8)))
    assert node_verdict(node(), tel, P).severity is Severity.OK
    v = node_verdict(node(ready=False, ready_reason="KubeletNotReady"), tel, P)
    assert v.severity is Severity.BAD and "KubeletNotReady" in v.summary
    assert node_verdict(node(ready=None), tel, P).severity is Severity.UNKNOWN
    seven = NodeTelemetry(node="n1", exporter_up=True, gpus=tuple(gpu(index=i) for i in range(7)))
    assert "only 7 of 8 GPUs" in node_verdict(node(), seven, P).summary


def test_fleet_puts_attention_first_and_a_failed_source_makes_gpu_nodes_unknown() -> None:
    nodes = [node(name=f"n{i}", gpu_capacity=1) for i in range(4)] + [
        node(name="cpu", gpu_capacity=None)
    ]
    hot = gpu(node="n2", temperature_c=85.0, temperature_min_window_c=84.0)
    fleet = FleetTelemetry(
        source="test",
        collected_at=0.0,
        window_s=300,
        nodes={
            "n0": NodeTelemetry(node="n0", exporter_up=True, gpus=(gpu(node="n0"),)),
            "n2": NodeTelemetry(node="n2", exporter_up=True, gpus=(hot,)),
            "n3": NodeTelemetry(
                node="n3", exporter_up=True, gpus=(gpu(node="n3", slowdown_margin_c=2.0),)
            ),
        },
    )
    order = [(v.info.name, v.verdict.severity.name) for v in fleet_views(nodes, fleet, P)]
    assert order == [
        ("n2", "BAD"),
        ("n1", "UNKNOWN"),
        ("n3", "SUSPECT"),
        ("cpu", "OK"),
        ("n0", "OK"),
    ]
    failed = fleet_views(nodes, None, P, telemetry_error="Prometheus at http://x does not answer")
    by = {v.info.name: v.verdict for v in failed}
    assert all(by[f"n{i}"].severity is Severity.UNKNOWN for i in range(4))
    assert "does not answer" in by["n0"].summary and by["cpu"].severity is Severity.OK


def test_taint_text_matches_kubectl() -> None:
    assert (
        str(Taint("krea.ai/unhealthy", "hot-gpu", "NoSchedule"))
        == "krea.ai/unhealthy=hot-gpu:NoSchedule"
    )
    assert (
        str(Taint("node.kubernetes.io/unreachable", None, "NoExecute"))
        == "node.kubernetes.io/unreachable:NoExecute"
    )
