"""The health policy on snapshots built by hand: each rule fires on what an operator would
call a problem, with the numbers in the sentence, and never calls missing data healthy."""

from __future__ import annotations

from datetime import UTC, datetime

from krea_ops.fleet import FleetSnapshot, gpu_entries
from krea_ops.health import (
    HealthPolicy,
    activity_doubt,
    fleet_views,
    gpu_verdict,
    node_verdict,
)
from krea_ops.kube.cluster import node_info
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
from krea_ops.settings import Settings

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


# --- one reason per finding, worst first ---------------------------------------------


def test_one_hot_gpu_is_one_reason_with_the_details_in_it() -> None:
    """A GPU at its slowdown temperature trips the hot, margin and four clock-event
    rules: the user reads one sentence, not five."""
    g = gpu(
        index=1,
        temperature_c=89.0,
        temperature_min_window_c=86.0,
        slowdown_margin_c=0.0,
        clock_events=frozenset({"sw_thermal", "hw_thermal", "hw_slowdown", "sw_power_cap"}),
    )
    v = gpu_verdict(g, P)
    assert v.severity is Severity.BAD
    assert [r.message for r in v.reasons] == [
        "GPU 1 at 89 °C, at or above 78 °C for the last 5 min, at its slowdown temperature, "
        "clocks held down by hardware and software thermal slowdown"
    ]
    assert v.reasons[0].code == "gpu_hw_thermal"
    warm = gpu_verdict(gpu(temperature_c=76.0, slowdown_margin_c=3.0), P)
    assert [r.message for r in warm.reasons] == [
        "GPU 0 at 76 °C, warm (at or above 75 °C), 3 °C from thermal slowdown (< 5 °C)"
    ]
    assert warm.severity is Severity.SUSPECT


def test_a_memory_error_is_one_reason_and_other_findings_stay_apart() -> None:
    """XID 48, the uncorrectable ECC count and the pending row remap are one memory
    event; an application XID on the same GPU is a finding of its own."""
    g = gpu(
        index=6,
        xid_increase={48: 1.0, 13: 2.0},
        ecc_uncorrected_increase=1.0,
        row_remap_pending=True,
    )
    v = gpu_verdict(g, P)
    assert [(r.severity.name, r.code) for r in v.reasons] == [
        ("BAD", "gpu_ecc_uncorrected"),
        ("SUSPECT", "xid_application"),
    ]
    memory = v.reasons[0].message
    assert memory.startswith("GPU 6: 1 uncorrectable ECC errors in the last 5 min")
    assert "XID 48 (1x): double-bit ECC error" in memory and "row remap is pending" in memory
    nvlink = gpu_verdict(gpu(xid_increase={74: 1.0}, nvlink_error_increase={"recovery": 3.0}), P)
    assert [r.message for r in nvlink.reasons] == [
        "GPU 0: 3 NVLink recovery/CRC errors in the last 5 min, XID 74 (1x): NVLink error"
    ]


def test_a_node_lists_its_reasons_worst_first_without_repeating() -> None:
    tel = NodeTelemetry(
        node="n1",
        exporter_up=True,
        gpus=(
            gpu(index=0, slowdown_margin_c=3.0),  # SUSPECT
            gpu(index=2, up=False, down_reason="gpu_is_lost", xid_increase={79: 1.0}),
            gpu(index=5, temperature_c=81.0, temperature_min_window_c=80.0),  # BAD
        ),
        nvlinks=tuple(
            NvLinkSample(node="n1", gpu=3, link=k, up=k != 4 and k != 9) for k in range(18)
        ),
        ib_ports=(
            IbPortSample(
                node="n1",
                device="mlx5_1",
                port="1",
                state="DOWN",
                phys_state="Polling",
                error_increase={"link_downed": 1.0, "symbol_error": 7.0},
            ),
        ),
    )
    v = node_verdict(node(gpu_capacity=3), tel, P)
    assert [r.message for r in v.reasons] == [
        "GPU 2 is not answering NVML (gpu is lost, after XID 79)",
        "GPU 5 at 81 °C, at or above 78 °C for the last 5 min",
        "NVLink gpu3/link4 and link9 are down while the GPU's other links are up",
        "IB mlx5_1/1 is DOWN, physical Polling, link went down 1x in the last 5 min, "
        "7 link errors in the last 5 min (mostly symbol_error)",
        "GPU 0 at 60 °C, 3 °C from thermal slowdown (< 5 °C)",
    ]
    assert len({r.message for r in v.reasons}) == len(v.reasons)


# --- NotReady ------------------------------------------------------------------------


def test_not_ready_is_bad_for_how_long_from_the_ready_condition() -> None:
    """A host that crashed: the node lifecycle controller set Ready to Unknown four
    minutes ago. The node cannot run work: BAD with how long, not UNKNOWN because its
    exporter went quiet too."""
    now = 1_800_000_000.0
    crashed = node(
        ready=None,
        ready_status="Unknown",
        ready_reason="NodeStatusUnknown",
        ready_message="Kubelet stopped posting node status.",
        ready_since=now - 245,
    )
    down = NodeTelemetry(node="n1", exporter_up=False, error="connection refused")
    v = node_verdict(crashed, down, P, now=now)
    assert v.severity is Severity.BAD
    assert [r.message for r in v.reasons] == [
        "NotReady for 4 min (kubelet stopped posting node status)",
        "exporter down: connection refused",
    ]
    kubelet = node(
        ready=False,
        ready_status="False",
        ready_reason="KubeletNotReady",
        ready_message="PLEG is not healthy: pleg was last seen active 3m0s ago",
        ready_since=now - 30,
    )
    assert node_verdict(kubelet, None, P, now=now).reasons[0].message == (
        "NotReady for 30 s (PLEG is not healthy: pleg was last seen active 3m0s ago)"
    )
    # a message that is a page of logs gives way to the reason; a transition after now
    # (the clocks disagree) gives no duration rather than a wrong one
    noisy = node(
        ready=False,
        ready_status="False",
        ready_reason="KubeletNotReady",
        ready_message="container runtime network not ready: " + "x" * 200,
        ready_since=now + 600,
    )
    assert node_verdict(noisy, None, P, now=now).reasons[0].message == "NotReady (KubeletNotReady)"
    # no Ready condition at all: a kubelet we have not heard from is unknown, not bad
    new = node_verdict(node(ready=None), None, P, now=now)
    assert new.severity is Severity.UNKNOWN


def test_ready_condition_is_read_from_the_node_object() -> None:
    info = node_info(
        {
            "metadata": {"name": "gpu-node-004"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "NodeStatusUnknown",
                        "message": "Kubelet stopped posting node status.",
                        "lastHeartbeatTime": "2026-11-29T20:56:00Z",
                        "lastTransitionTime": "2026-11-29T21:00:00Z",
                    }
                ]
            },
        }
    )
    assert info.ready is None and info.ready_status == "Unknown"
    assert info.ready_since == datetime(2026, 11, 29, 21, tzinfo=UTC).timestamp()
    v = node_verdict(info, None, P, now=info.ready_since + 4 * 60)
    assert v.reasons[0].message == "NotReady for 4 min (kubelet stopped posting node status)"


def test_a_not_ready_nodes_gpus_with_fresh_readings_keep_their_own_verdicts() -> None:
    """After a GPU is lost the node is NotReady: the lost GPU is BAD, the seven others
    keep their readings and verdicts. A node whose exporter is gone lists its GPUs with
    the node's reasons."""
    now = 1_800_000_000.0
    failed = node(name="n1", ready=None, ready_status="Unknown", ready_since=now - 60)
    tel = NodeTelemetry(
        node="n1",
        exporter_up=True,
        gpus=tuple(
            gpu(index=i, up=False, down_reason="gpu_is_lost") if i == 2 else gpu(index=i)
            for i in range(8)
        ),
    )
    dark = node(name="n2", ready=None, ready_status="Unknown", ready_since=now - 300)
    fleet = FleetTelemetry(
        source="test",
        collected_at=now,
        window_s=300,
        nodes={"n1": tel, "n2": NodeTelemetry(node="n2", exporter_up=False, error="refused")},
    )
    views = fleet_views([failed, dark], fleet, P, now=now)
    snap = FleetSnapshot(tuple(views), fleet, None, "test", now, P)
    entries = {(e.node, e.index): e for e in gpu_entries(snap)}
    assert entries[("n1", 2)].verdict.severity is Severity.BAD
    assert entries[("n1", 2)].verdict.reasons[0].code == "gpu_lost"
    assert all(entries[("n1", i)].verdict.severity is Severity.OK for i in range(8) if i != 2)
    assert entries[("n1", 0)].sample is not None
    n2 = [entries[("n2", i)] for i in range(8)]
    assert {e.verdict.severity for e in n2} == {Severity.BAD}
    assert [r.message for r in n2[0].verdict.reasons] == [
        "NotReady for 5 min (kubelet stopped posting node status)",
        "exporter down: refused",
    ]


# --- readings that contradict each other -----------------------------------------------


def test_activity_readings_that_contradict_each_other_are_doubtful() -> None:
    # what a new user saw: no busy time, yet tensor cores at work
    d = activity_doubt(gpu(util_ratio=0.0, sm_active_ratio=0.3, tensor_active_ratio=0.14), P)
    assert d is not None
    assert d.fields == {"util_ratio", "sm_active_ratio"}
    assert d.message == (
        "GPU 0: activity readings disagree (SM 30% above busy 0%; sampling skew allows 10 points)"
    )
    # without an SM reading, tensor against busy
    d = activity_doubt(gpu(util_ratio=0.4, tensor_active_ratio=0.56), P)
    assert d is not None and d.fields == {"util_ratio", "tensor_active_ratio"}
    # tensor above SM is one GPM window disagreeing with itself: no skew allowed
    d = activity_doubt(gpu(util_ratio=1.0, sm_active_ratio=0.5, tensor_active_ratio=0.6), P)
    assert d is not None and d.fields == {"tensor_active_ratio", "sm_active_ratio"}
    # within what sampling explains, or unknown: no doubt
    assert (
        activity_doubt(gpu(util_ratio=0.5, sm_active_ratio=0.58, tensor_active_ratio=0.3), P)
        is None
    )
    assert (
        activity_doubt(gpu(util_ratio=None, sm_active_ratio=0.9, tensor_active_ratio=0.6), P)
        is None
    )
    assert (
        activity_doubt(gpu(util_ratio=1.0, sm_active_ratio=0.9, tensor_active_ratio=0.6), P) is None
    )
    # the allowance is a setting
    strict = HealthPolicy.from_settings(Settings(health_activity_skew_ratio=0.05))
    assert strict.activity_skew_ratio == 0.05
    assert activity_doubt(gpu(util_ratio=0.5, sm_active_ratio=0.58), strict) is not None
    # a doubt leaves the verdict alone: no health rule reads activity
    assert gpu_verdict(gpu(util_ratio=0.0, sm_active_ratio=0.3), P).severity is Severity.OK


def test_doubtful_readings_are_marked_where_a_user_reads_them() -> None:
    """``gpus`` prints a contradicting reading with a ``?`` and says why under the
    table; JSON keeps the numbers and names them; the dashboard's node screen marks the
    cells and gives the reason."""
    from commands.gpus import COLUMNS, HEADERS, MARKED_FORMATS, attention_lines, gpu_rows, marked
    from commands.output import OutputFormat, render
    from screens.node import gpu_cells

    now = 1_800_000_000.0
    odd = gpu(index=3, util_ratio=0.0, sm_active_ratio=0.3, tensor_active_ratio=0.14)
    fine = gpu(index=4, util_ratio=1.0, sm_active_ratio=0.9, tensor_active_ratio=0.6)
    tel = NodeTelemetry(node="n1", exporter_up=True, gpus=(odd, fine))
    fleet = FleetTelemetry(source="test", collected_at=now, window_s=300, nodes={"n1": tel})
    views = fleet_views([node(gpu_capacity=2)], fleet, P, now=now)
    snap = FleetSnapshot(tuple(views), fleet, None, "test", now, P)
    rows = gpu_rows(snap)
    by = {r["index"]: r for r in rows}
    assert by[3]["doubtful"] == ["sm_active_ratio", "util_ratio"]
    assert by[3]["util_ratio"] == 0.0 and by[3]["verdict"] == "OK"  # JSON: the numbers
    assert by[4]["doubtful"] == [] and by[4]["doubt"] is None
    table = render(
        marked(rows), OutputFormat.table, columns=COLUMNS, headers=HEADERS, formats=MARKED_FORMATS
    )
    line3 = next(ln for ln in table.splitlines() if ln.startswith("n1    3"))
    line4 = next(ln for ln in table.splitlines() if ln.startswith("n1    4"))
    assert " 0%? " in line3 and " 14% " in line3  # tensor agrees with SM: not marked
    assert "?" not in line4 and " 100% " in line4
    assert attention_lines(rows, lambda r: f"{r['node']}/gpu{r['index']}").strip() == (
        "n1/gpu3: OK: GPU 3: activity readings disagree (SM 30% above busy 0%; "
        "sampling skew allows 10 points)"
    )
    entry = next(e for e in gpu_entries(snap) if e.index == 3)
    cells = gpu_cells(entry, P)
    assert (str(cells[4]), cells[4].style) == ("0%?", "magenta")  # busy
    assert str(cells[5]) == "14%"  # tensor
    assert "activity readings disagree" in str(cells[-1])


def test_gpus_listed_without_any_current_reading_are_unknown_not_ok() -> None:
    """For up to ``telemetry_stale_s`` after a host's exporter target disappears,
    Prometheus still lists its GPUs (identity, last sample time) with no readings. That
    is a node we cannot see, not a healthy one."""
    now = 1_800_000_000.0
    silent = tuple(GpuSample(node="n1", index=i, sampled_at=now - 40) for i in range(8))
    tel = NodeTelemetry(
        node="n1", exporter_up=True, last_sample_at=now - 40, age_s=40.0, gpus=silent
    )
    crashed = node(ready=None, ready_status="Unknown", ready_since=now - 60)
    fleet = FleetTelemetry(source="test", collected_at=now, window_s=300, nodes={"n1": tel})
    views = fleet_views([crashed], fleet, P, now=now)
    assert [r.message for r in views[0].verdict.reasons] == [
        "NotReady for 60 s (kubelet stopped posting node status)",
        "no current readings from its GPUs (last sample 40 s ago)",
    ]
    entries = gpu_entries(FleetSnapshot(tuple(views), fleet, None, "test", now, P))
    assert {e.verdict.severity for e in entries} == {Severity.BAD}
    assert entries[0].verdict.reasons[1].code == "gpu_no_readings"
    # one GPU gone quiet among readers: it alone is unknown
    some = (*(gpu(index=i) for i in range(7)), GpuSample(node="n1", index=7))
    v = node_verdict(node(), NodeTelemetry(node="n1", exporter_up=True, gpus=some), P)
    assert v.severity is Severity.UNKNOWN
    assert [r.message for r in v.reasons] == ["no current readings from GPU 7"]
