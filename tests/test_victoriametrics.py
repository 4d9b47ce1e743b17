"""VictoriaMetrics as the metrics backend: fed the same scrapes, it answers what Prometheus does.

One set of exporters (ours in this process with simulated H200s and a sysfs tree each, a
dcgm-exporter's text, node_exporter's InfiniBand text) is scraped by a real Prometheus
(Debian's ``prometheus``) that remote-writes every sample to a real single-node
VictoriaMetrics (Debian's ``victoria-metrics``, loopback only, data in a temp dir). The
faults make non-trivial readings: a hot GPU, NVLink replay and CRC errors counting, IB
symbol errors counting, an IB port congested, an XID and uncorrectable ECC errors inside
the window, every IB data counter moving.

Then every read that uses telemetry is made once against each: the product's
``PrometheusSource`` at one pinned instant (every field of the fleet), the dashboard's
fleet read (``Console.fleet``, verdicts and reasons per node), and ``krea-ops gpus``,
``fabric``, ``nodes list`` and ``nodes show NODE`` as a user runs them with
``--prometheus``. Verdicts, reasons, states and gauges must be equal. Rates and increases
may differ by ``RATE_TOLERANCE`` only, because the engines define them differently
(https://docs.victoriametrics.com/metricsql/): "MetricsQL takes into account the previous
point before the window in square brackets for range functions such as rate and
increase" and "MetricsQL doesn't extrapolate range function results", where Prometheus
extrapolates from the first and last samples inside the window towards its edges. With a
steady counter both estimate the same rate; they part by up to about a scrape interval
over the window (here 1 s over 10 s), and a burst (2 ECC errors) reads 2 on
VictoriaMetrics and about 2.2 on Prometheus. Gauges are compared to 1e-9 relative:
VictoriaMetrics stores a float as a decimal mantissa and exponent, so
0.9470000000000054 comes back as 0.947.

The vmalert test loads the recording and alert rules of ``deploy/prometheus`` into
Debian's ``vmalert`` (``-dryRun``): the rules a Prometheus evaluates are valid MetricsQL.

In CI (``CI`` set) a missing binary fails these tests; elsewhere it skips them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from commands.main import invoke
from krea_ops.console import Console, FleetScope
from krea_ops.kube.cluster import Cluster
from krea_ops.model import FleetTelemetry
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.telemetry import PrometheusSource
from tests.conftest import NODE_EXPORTER_TREE, PROCFS_TREE, ROOT, free_port, require_binary
from tests.kube.conftest import create, report_ready
from tests.telemetry.conftest import (
    KreaNode,
    Prometheus,
    Target,
    TextServer,
    settings,
    start_krea_node,
    wait_until,
)
from tests.telemetry.dcgm_text import DcgmGpu, dcgm_text

WINDOW_S = 10.0
# generous: the pinned instant is some seconds old when the last command reads it
STALE_S = 120.0
# rates and increases: relative, plus an absolute floor for values near 0
RATE_TOLERANCE = 0.25
RATE_FLOOR = 0.05
GAUGE_TOLERANCE = 1e-9
NODE_EXPORTER_TEXT = (NODE_EXPORTER_TREE.parent / "node_exporter-expected.prom").read_text()
KREA_NODES = ("gpu-node-000", "gpu-node-001", "gpu-node-002", "gpu-node-003")
ALL_NODES = (*KREA_NODES, "dcgm-node", "ib-node")
COUNTERS = Path("class/infiniband/mlx5_0/ports/1/counters")


class VictoriaMetrics:
    """Debian's single-node ``victoria-metrics`` on a temp dir, on loopback."""

    def __init__(self) -> None:
        binary = require_binary("victoria-metrics")
        self._tmp = tempfile.TemporaryDirectory()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.url}/api/v1/write"
        self._log = open(Path(self._tmp.name) / "vm.log", "wb")  # noqa: SIM115 (the child's)
        self.proc = subprocess.Popen(
            [
                binary,
                f"-storageDataPath={self._tmp.name}/data",
                "-retentionPeriod=1d",
                f"-httpListenAddr=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"victoria-metrics exited: {self.log()}")
            try:
                return urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200
            except OSError:
                return False

        try:
            wait_until(healthy, timeout=60)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        return (Path(self._tmp.name) / "vm.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()
        self._tmp.cleanup()


def query(url: str, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query (``nocache=1``: VictoriaMetrics answers at the time asked, see
    docs/operations.md); [] when the server does not answer."""
    params = {"query": promql, "nocache": "1"}
    if at is not None:
        params["time"] = f"{at:.3f}"
    try:
        with urllib.request.urlopen(
            f"{url}/api/v1/query?" + urllib.parse.urlencode(params), timeout=10
        ) as response:
            return list(json.load(response)["data"]["result"])
    except OSError:
        return []


def scalar(url: str, promql: str, at: float | None = None) -> float | None:
    rows = query(url, promql, at)
    return float(rows[0]["value"][1]) if rows else None


def bump(path: Path, by: int) -> None:
    """Add ``by`` to a sysfs counter file in place (the exporter keeps it open)."""
    with open(path, "r+") as f:
        value = int(f.read().strip() or 0) + by
        f.seek(0)
        f.write(f"{value}\n")
        f.truncate()


class Store(Protocol):
    """A VictoriaMetrics Prometheus remote-writes into: ``url`` is where krea-ops reads it
    (the base under which ``/api/v1/query`` answers), ``write_url`` its remote-write URL."""

    url: str
    write_url: str

    def stop(self) -> None: ...


@dataclass
class Stack:
    prom: Prometheus
    vm: Store
    krea: dict[str, KreaNode]
    api: LocalApiServer
    # the instant the pinned reads are evaluated at: both stores hold every sample
    # up to it (see ``same_samples``)
    at: float

    def clock(self) -> float:
        return self.at


def newest(url: str, at: float) -> dict[frozenset[tuple[str, str]], float] | None:
    """Each series' newest sample time in the window and a half before ``at`` (an
    instant query of a range selector returns the raw samples; staleness markers, which
    a scrape that failed leaves, are not samples). None: the store did not answer."""
    rows = query(url, f'{{__name__=~".+"}}[{int(WINDOW_S * 1.5)}s]', at)
    out = {}
    for r in rows:
        times = [float(t) for t, v in r.get("values") or () if v != "NaN"]
        if times:
            out[frozenset(r["metric"].items())] = max(times)
    return out or None


def same_samples(prom: str, vm: str, at: float) -> bool:
    """Both stores hold the same newest sample of every series up to ``at``: whatever
    Prometheus scraped by then has reached VictoriaMetrics."""
    p = newest(prom, at)
    return p is not None and p == newest(vm, at)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binary("prometheus")
    with running_stack(tmp_path_factory.mktemp("vm"), VictoriaMetrics) as made:
        yield made


@contextlib.contextmanager
def running_stack(tmp: Path, store: Callable[[], Store]) -> Iterator[Stack]:
    """The exporters, ``store()`` and a Prometheus that scrapes them and remote-writes
    into it, the API server, filled and pinned (see the module's docstring); all stopped
    after. tests/test_victoriametrics_cluster.py runs the same with the cluster version."""
    stop = threading.Event()
    started: list[Any] = []
    try:
        krea: dict[str, KreaNode] = {}
        trees: dict[str, Path] = {}
        for i, name in enumerate(KREA_NODES):
            trees[name] = tmp / name
            shutil.copytree(PROCFS_TREE, trees[name])
            krea[name] = start_krea_node(name, trees[name], seed=i)
            started.append(krea[name])
        krea["gpu-node-001"].nvml.gpus[3].temperature_c = 91  # hot
        dcgm = [DcgmGpu(index=i) for i in range(4)]
        dcgm[2].temp = 86  # hot, in DCGM's names
        t0 = time.time()
        servers = [
            TextServer(lambda: dcgm_text(dcgm, new_names=True, host="dcgm-node", t0=t0)),
            TextServer(lambda: NODE_EXPORTER_TEXT),
        ]
        started += servers

        def move() -> None:
            """Every 0.25 s: data counters move on every node; symbol errors count on
            gpu-node-001's mlx5_0, xmit wait is high on gpu-node-002's; NVLink replays
            and CRC errors count on one link of gpu-node-002's GPU 5."""
            tick = 0
            while not stop.wait(0.25):
                tick += 1
                for name, tree in trees.items():
                    counters = tree / COUNTERS
                    bump(counters / "port_rcv_data", 250_000)
                    bump(counters / "port_xmit_data", 125_000)
                    bump(counters / "port_xmit_wait", 1_000 if name == "gpu-node-002" else 10)
                    if name == "gpu-node-001" and tick % 2 == 0:
                        bump(counters / "symbol_error", 1)
                if tick % 4 == 0:
                    link = krea["gpu-node-002"].nvml.gpus[5].nvlinks[2]
                    link.replay += 3
                    link.crc_flit += 1

        mover = threading.Thread(target=move, daemon=True)
        mover.start()

        vm = store()
        started.append(vm)
        targets = [Target(k.address, "krea") for k in krea.values()]
        targets += [
            Target(servers[0].address, "dcgm"),
            Target(servers[1].address, "node-exporter", {"node": "ib-node"}),
        ]
        prom = Prometheus(targets, remote_write=vm.write_url)
        started.append(prom)

        # the API server the commands list nodes from: one Ready node per exporter's
        api = LocalApiServer(tmp / "api")
        started.append(api)
        with api.api_client() as client:
            cluster = Cluster(client, timeout_s=30)
            for name in ALL_NODES:
                create(cluster, "/api/v1/nodes", {"metadata": {"name": name}})
                report_ready(cluster, name, wait=False)

        # the window fills with history first (rate() needs it), then the events land
        # inside it: an XID, uncorrectable ECC errors
        def filled() -> bool:
            return bool(
                (n := scalar(vm.url, 'min(count_over_time(up{job="krea"}[1m]))')) and n >= WINDOW_S
            )

        wait_until(filled, timeout=90)
        assert krea["gpu-node-001"].nvml.inject_xid(2, 79) == 1
        krea["gpu-node-003"].nvml.gpus[6].add_ecc_errors(uncorrected=2)
        for url in (prom.url, vm.url):
            for promql in (
                "krea_gpu_xid_last > 0",
                'krea_gpu_ecc_errors_total{error_type="uncorrected",counter_type="volatile"} >= 2',
            ):
                wait_until(functools.partial(query, url, promql), timeout=60)
        # a few more scrapes after the events, then pin the instant both hold
        time.sleep(2.0)
        at = time.time() - 1.0
        wait_until(lambda: same_samples(prom.url, vm.url, at), timeout=60)
        yield Stack(prom, vm, krea, api, at)
    finally:
        stop.set()
        for part in reversed(started):
            with contextlib.suppress(Exception):  # tearing down the rest matters more
                part.close() if isinstance(part, LocalApiServer) else part.stop()


# -- comparing ---------------------------------------------------------------------------

# Fields of the read model and the JSON that are rates or increases over the window, or
# figures derived from them (a share of the link's time waiting; ``gpus``' nvlink_errors
# and xid_counts are counts in the window, docs/cli.md)
RATE_KEY = re.compile(
    r"(rate|per_s|increase|_in_window|congestion|wait_ratio|xmit_wait|^nvlink_errors$|xid_counts)"
)
# Fields that say when or from where the read was made: never compared
WHEN_KEY = re.compile(r"(^age|_age|age_s$|_at$|^at$|collected|source|telemetry$)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def close(a: float, b: float, rate: bool) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if rate:
        return abs(a - b) <= max(RATE_FLOOR, RATE_TOLERANCE * max(abs(a), abs(b)))
    return abs(a - b) <= GAUGE_TOLERANCE * max(abs(a), abs(b), 1e-300)


def texts_agree(a: str, b: str) -> bool:
    """Two reasons agree: the same words, and each number equal, or within the rate
    tolerance (a reason's count of errors in the window is an increase)."""
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    return all(
        close(float(x), float(y), rate=True)
        for x, y in zip(NUMBER.findall(a), NUMBER.findall(b), strict=True)
    )


def differences(a: Any, b: Any, path: str = "", rate: bool = False) -> list[str]:
    """Where two reads differ beyond what the engines' definitions allow."""
    out: list[str] = []
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        names = [f.name for f in dataclasses.fields(a)]
        a, b = {n: getattr(a, n) for n in names}, {n: getattr(b, n) for n in names}
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"]
        for key in a:
            name = str(key)
            if WHEN_KEY.search(name):
                continue
            out += differences(
                a[key], b[key], f"{path}.{name}", rate or bool(RATE_KEY.search(name))
            )
        return out
    if isinstance(a, (list, tuple, set, frozenset)) and isinstance(
        b, (list, tuple, set, frozenset)
    ):
        if isinstance(a, (set, frozenset)):
            return [] if a == b else [f"{path}: {sorted(a)} != {sorted(b)}"]
        if len(a) != len(b):

            def ids(xs: Any) -> list[str]:
                keys = ("node", "name", "kind", "port", "index")
                return [
                    "/".join(str(x.get(k)) for k in keys if k in x) if isinstance(x, dict) else ""
                    for x in xs
                ]

            return [f"{path}: {len(a)} items != {len(b)}: {ids(a)} != {ids(b)}"]
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{path}[{i}]", rate)
        return out
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return [] if a == b else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return [] if close(float(a), float(b), rate) else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, str) and isinstance(b, str):
        ok = a == b or (NUMBER.search(a) is not None and texts_agree(a, b))
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


# -- the reads ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_targets_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reads compare what the two engines answer to the same PromQL. Prometheus'
    targets API (which scrapes fail *now*, not at the pinned instant) is no query and has
    no VictoriaMetrics peer (docs/operations.md, "Scrape errors"): on a loaded machine one
    scrape timing out after the pinned instant marked a node down on Prometheus alone.
    Both reads get no failing targets."""
    monkeypatch.setattr(PrometheusSource, "_targets", lambda self: [])


def read_settings() -> Any:
    return settings(telemetry_window_s=WINDOW_S, telemetry_stale_s=STALE_S)


def commands_at_the_pinned_instant(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read commands invoked in this process read with the test's settings, every
    PrometheusSource on the stack's pinned clock (counters that keep moving read the same
    on every store)."""
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_WINDOW_S", f"{WINDOW_S:g}")
    monkeypatch.setenv("KREA_OPS_TELEMETRY_STALE_S", f"{STALE_S:g}")
    monkeypatch.delenv("KREA_OPS_PROMETHEUS_URL", raising=False)
    defaults = dict(PrometheusSource.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(
        PrometheusSource.__init__, "__kwdefaults__", {**defaults, "clock": stack.clock}
    )


def pinned(stack: Stack, url: str, **kw: Any) -> FleetTelemetry:
    with PrometheusSource(url, read_settings(), clock=stack.clock) as s:
        return s.collect(**kw)


@pytest.mark.parametrize(
    "read",
    [
        pytest.param({}, id="everything"),
        pytest.param({"families": {"verdicts"}}, id="verdicts-from-summaries"),
        pytest.param({"nodes": {"gpu-node-001"}}, id="one-node"),
        pytest.param({"families": {"gpu", "nvlink"}}, id="gpus"),
        pytest.param({"families": {"ib", "ib_detail", "nvlink", "nvlink_detail"}}, id="fabric"),
    ],
)
def test_every_reading_is_the_same_on_both_at_one_instant(
    stack: Stack, read: dict[str, Any]
) -> None:
    on_prom = pinned(stack, stack.prom.url, **read)
    on_vm = pinned(stack, stack.vm.url, **read)
    assert on_prom.errors == () and on_vm.errors == ()
    assert sorted(on_prom.nodes) == sorted(on_vm.nodes)
    assert on_prom.nodes, "nothing read"
    assert differences(on_prom, on_vm) == []
    # the reads saw the faults (not two empty answers agreeing)
    if not read:
        hot = on_vm.nodes["gpu-node-001"].gpus[3]
        assert hot.temperature_c == 91 and hot.xid_last is None
        assert on_vm.nodes["gpu-node-001"].gpus[2].xid_last == 79
        assert (on_vm.nodes["gpu-node-002"].gpus[5].nvlink_fault_increase or 0) > 0
        assert on_vm.nodes["dcgm-node"].gpus[2].temperature_c == 86
        assert on_vm.dialects == {"krea", "dcgm", "node_exporter"}


@pytest.mark.parametrize(
    "families",
    [
        pytest.param(None, id="fabric-screen"),
        pytest.param(frozenset({"verdicts", "gpu"}), id="fleet-screen"),
        pytest.param(frozenset({"verdicts"}), id="header"),
    ],
)
def test_the_dashboards_fleet_read_gives_the_same_verdicts_and_reasons(
    stack: Stack, families: frozenset[str] | None
) -> None:
    """What the dashboard reads each refresh (``Console.fleet`` with the visible
    screen's families): each node's verdict and reasons, and its readings."""
    reads = []
    for url in (stack.prom.url, stack.vm.url):
        source = PrometheusSource(url, read_settings(), clock=stack.clock)
        with stack.api.api_client() as client:
            console = Console(read_settings(), cluster=Cluster(client, timeout_s=30), source=source)
            with console:
                snapshot = console.fleet(FleetScope.of(families=families))
        assert snapshot.telemetry_error is None
        reads.append(snapshot)
    on_prom, on_vm = reads
    verdicts = [
        {v.info.name: (v.verdict.severity.name, [r.message for r in v.verdict.reasons])
         for v in snapshot.views}
        for snapshot in reads
    ]  # fmt: skip
    assert set(verdicts[0]) == set(ALL_NODES)
    assert differences(verdicts[0], verdicts[1]) == []
    assert differences(on_prom.telemetry, on_vm.telemetry) == []
    assert verdicts[1]["gpu-node-000"][0] == "OK"
    # (gpu-node-003's ECC errors may have left the window on a slow machine: compared only)
    for bad in ("gpu-node-001", "gpu-node-002", "dcgm-node"):
        assert verdicts[1][bad][0] != "OK", verdicts[1][bad]


def by_identity(rows: Any) -> Any:
    """A command's rows in one order: ``fabric`` ranks ports by their rates, so two with
    the same traffic (within the rate tolerance) may come in either order."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return rows
    keys = ("node", "name", "kind", "port", "index")
    return sorted(rows, key=lambda r: tuple(str(r.get(k)) for k in keys))


COMMANDS = (
    ("gpus",),
    ("fabric",),
    ("fabric", "--kind", "nvlink"),
    ("nodes", "list"),
    ("nodes", "show", "gpu-node-001"),
    ("nodes", "show", "gpu-node-002"),
)


def test_the_read_commands_print_the_same_figures(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``krea-ops gpus``, ``fabric``, ``nodes list`` and ``nodes show NODE`` with
    ``--prometheus`` at each (in this process: their reads are evaluated at the pinned
    instant, through the source's clock as every telemetry test pins it, so counters that
    keep moving read the same on both)."""
    commands_at_the_pinned_instant(stack, monkeypatch)
    for args in COMMANDS:
        printed = []
        for url in (stack.prom.url, stack.vm.url):
            capsys.readouterr()
            kube = ["--kubeconfig", str(stack.api.kubeconfig), "--prometheus", url]
            code = invoke([*kube, *args, "-o", "json"])
            out, err = capsys.readouterr()
            assert code == 0, (args, url, err)
            printed.append(by_identity(json.loads(out)))
        on_prom, on_vm = printed
        assert on_prom, args
        assert differences(on_prom, on_vm) == [], args
    # what they showed: the faults, alike on both (the last read: gpu-node-002)
    assert on_vm[0]["verdict"] == "SUSPECT"
    assert any("NVLink" in r for r in on_vm[0]["reasons"])


def test_a_url_with_a_path_prefix_reads_the_same(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Prometheus URL setting is the base under which ``/api/v1/query`` answers, path
    and all: the cluster version's vmselect answers under ``/select/<tenant>/prometheus``
    (tests/test_victoriametrics_cluster.py), and the single-node VictoriaMetrics under
    ``/prometheus`` as well as at its root. A read and a command through that prefix (with
    a trailing slash, as one is often pasted) give what the root gives."""
    prefixed = f"{stack.vm.url}/prometheus/"
    at_root = pinned(stack, stack.vm.url)
    through = pinned(stack, prefixed)
    assert through.errors == () and through.nodes
    assert differences(at_root, through) == []
    commands_at_the_pinned_instant(stack, monkeypatch)
    printed = []
    for url in (stack.vm.url, prefixed):
        capsys.readouterr()
        code = invoke(
            ["--kubeconfig", str(stack.api.kubeconfig), "--prometheus", url, "gpus", "-o", "json"]
        )
        out, err = capsys.readouterr()
        assert code == 0, (url, err)
        printed.append(json.loads(out))
    assert printed[0] and differences(printed[0], printed[1]) == []


def test_the_comparison_sees_a_difference() -> None:
    """``differences`` itself: a gauge, a verdict, a reason's words or a rate beyond the
    tolerance is a difference; a rate within it and when a read was made are not."""
    base = {"node": "n", "temperature_c": 91.0, "verdict": "BAD", "age_s": 0.3,
            "reasons": ["IB mlx5_0/1: 20 link errors in the last 10 s"],
            "errors_in_window": 20.0, "xmit_wait_per_s": 38.9}  # fmt: skip
    assert differences(base, dict(base)) == []
    within = {**base, "age_s": 4.0, "errors_in_window": 19.0, "xmit_wait_per_s": 39.0,
              "reasons": ["IB mlx5_0/1: 19 link errors in the last 10 s"]}  # fmt: skip
    assert differences(base, within) == []
    changes: list[dict[str, Any]] = [
        {"temperature_c": 90.0},
        {"temperature_c": 91.0 + 1e-6},
        {"verdict": "SUSPECT"},
        {"errors_in_window": 30.0},
        {"reasons": ["IB mlx5_0/1: 20 link errors in the last 10 s (mostly symbol_error)"]},
        {"reasons": ["IB mlx5_0/1: 40 link errors in the last 10 s"]},
        {"reasons": []},
    ]
    for change in changes:
        assert differences(base, {**base, **change}) != [], change


def test_the_alert_and_recording_rules_load_into_vmalert(tmp_path: Path) -> None:
    """Every rule file of deploy/prometheus parses and validates as MetricsQL in Debian's
    ``vmalert -dryRun`` (expressions and annotation templates), so the same rules run on
    vmalert against VictoriaMetrics; a broken expression fails it (the check is real)."""
    vmalert = require_binary("vmalert")
    rules = sorted(
        p
        for p in (ROOT / "deploy" / "prometheus").glob("*.yaml")
        if not p.name.endswith(".test.yaml")
    )
    assert rules

    def dry_run(*files: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [vmalert, "-dryRun", *(f"-rule={f}" for f in files)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    checked = dry_run(*rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(foo[5m]\n")
    failed = dry_run(*rules, broken)
    assert failed.returncode != 0 and "broken.yaml" in failed.stdout + failed.stderr
