"""Node validation Jobs, answered by the simulated machines from their hardware model.

A real kubelet would run the validation pod's ``/bin/bash -c SCRIPT`` (``krea_ops.validation
.script``): ``dcgmi diag``, nccl-tests' ``all_reduce_perf`` and, for a full validation,
perftest's ``ib_write_bw`` on every InfiniBand port, each in a section the script marks.
Nothing runs it in the simulator, so :class:`ValidationActor` plays the container: it
recognises a validation pod by what its container runs (a command holding ``dcgmi diag``;
nothing the product adds for the simulator), reads the level from the ``-r N`` of that
command (2 quick, 3 full) and whether an ``ib_write_bw`` section exists, and over simulated
time writes into the container's log (the shared ``podlogs.LogStore``, as the trainers'
lines are written) what bash and the tools would print: the script's ``echo`` lines as it
prints them (its variables expanded from the container's environment), each tool's output
in the tool's own format, ``=== exit N`` after each, ``=== done``; then the container exits
through ``world.services["container-exits"]`` with the script's code (1 when a tool exited
non-zero, else 0), and the kubelet reports it terminated.

Durations, in simulated seconds (``WorldConfig.extra``; the world's speed scales them
like everything else): ``validation_dcgm_r2_s`` (default 120, DCGM's "medium, about two
minutes"), ``validation_dcgm_r3_s`` (900, "long, about 15 minutes"),
``validation_nccl_s`` (60), ``validation_ib_s`` (15 a port, after the script's ``sleep
2``); ``validation_period_s`` (the actor's period, default ``max(1, speed / 4)``).
The section of each tool is written when the tool finishes; what it prints is read from
the devices (``world.services["devices"]``) at that moment.

What the tools find (the node's own GPU count, GPU name, PCI ids, driver and HCAs, as the
device service models them):

``dcgmi diag -r 2|3`` (DCGM 3.3's table, ``Diag.cpp``: a row per test, ``Pass - All``,
  or ``Pass - GPUs: 0, 1, ...`` with a continuation row ``Fail - GPU: 3``, then the
  ``Warning`` rows DCGM shows for a failure, wrapped at 45 characters). The tests of each
  run level follow DCGM's run-level table: level 2 runs the deployment checks, PCIe, GPU
  Memory and Memory Bandwidth; level 3 adds Diagnostic, Targeted Stress and Targeted Power.

  * a lost GPU fails every GPU test it is in, with ``GPU N failed to create a CUDA
    context`` (DCGM_FR_CUDA_CONTEXT);
  * uncorrectable ECC errors fail GPU Memory (``Detected N volatile double-bit ECC
    error(s) in GPU N.``) and a pending row remap fails the deployment check
    ``Page Retirement/Row Remap`` (``GPU N had memory errors and row remappings are
    pending``);
  * an NVLink that is down fails PCIe (``GPU N's NvLink link L is currently down``);
  * a GPU that runs hot under the stress (its sensor held by a ``hot-gpu`` fault, or its
    steady state at the stress' power at or above ``HOT_C``, 78 °C, the health policy's
    hot threshold) fails the stress test of the level with DCGM's thermal warnings
    (``Thermal violations totaling ... for GPU N`` and ``Clocks are being throttled for
    GPU N ...``): at level 2 **Memory Bandwidth** (the only level-2 test that loads the
    GPU for long: DCGM's plugins watch thermal violations while they run), at level 3
    **Targeted Power** (the power stress; Memory Bandwidth passes there).

  A failing ``dcgmi diag`` exits 226 (DCGM_ST_NVVS_ERROR, -30, as an exit status).

``all_reduce_perf`` (nccl-tests): the ``# nThread ...`` header, ``# Using devices`` with a
  line per GPU, the out-of-place/in-place table from ``-b`` to ``-e`` by ``-f``, ``# Out of
  bounds values : 0 OK`` and ``# Avg bus bandwidth``. A healthy 8-GPU HGX reaches
  ``validation_busbw_gbps`` (default 476 GB/s) at the largest size, with seeded noise of
  about 1 %; an NVLink with climbing errors (``nvlink-errors``) or down brings it to
  ~55 % (replays and a lost link); a lost GPU makes NCCL fail (``Test NCCL failure
  common.cu:... 'unhandled cuda error ...'``, exit 3).

``ib_write_bw -d mlx5_N ... localhost`` (perftest's client): the ``RDMA_Write BW Test``
  box, the local and remote address lines, the ``#bytes #iterations BW peak[Gb/sec] BW
  average[Gb/sec] MsgRate[Mpps]`` row (``-D``: duration mode, no peak); a healthy NDR port
  ~392 Gb/s (``validation_ib_gbps``); a port that is down (``ib-flap``, an ``ib-link``
  failure) prints `` Port number 1 state is Down`` and `` Couldn't set the link layer``
  and exits 1.

While it runs the pod holds every GPU of its node (its ``nvidia.com/gpu`` request), so
the devices already count it as a GPU pod of the node.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from krea_ops.kube.times import parse_time
from krea_ops.sim.common import podlogs
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.objects import meta_of, spec_of, status_of
from krea_ops.sim.machines.kubelet import EXITS_SERVICE
from krea_ops.validation import MARK

DCGM_VERSION = "3.3.9"
HOT_C = 78.0  # the health policy's hot threshold (krea_ops.health.HealthPolicy.hot_c)
STRESS_W = 690.0  # what DCGM's stress tests draw from an H100/H200 (700 W limit)
BUSBW_GBPS = 476.0  # 8-GPU HGX H100/H200 all-reduce bus bandwidth at 8 GB
DEGRADED_NVLINK = 0.55  # share of it left with an NVLink replaying or down
IB_GBPS = 392.0  # NDR 400 RDMA write, one QP, 64 KiB messages
DCGM_FAIL_EXIT = 226  # DCGM_ST_NVVS_ERROR (-30) as an exit status
NCCL_FAIL_EXIT = 3  # nccl-tests' testNcclError
PERFTEST_FAIL_EXIT = 1
SCRIPT_FAIL_EXIT = 1

_DCGM = re.compile(r"\bdcgmi\s+diag\b")
_ECHO = re.compile(r'^\s*echo "(.*)"\s*$')
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


# -- what the script says --------------------------------------------------------------------


def is_validation(container: dict[str, Any]) -> bool:
    """Whether a container runs a validation: its command or args call ``dcgmi diag``."""
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    return any(_DCGM.search(str(w)) for w in words)


@dataclass(frozen=True)
class ScriptPlan:
    """What a validation script runs, read from its text."""

    banner: tuple[str, ...]  # echo lines before the first section (unexpanded)
    dcgm: str | None  # the dcgm section's command, as its mark prints it
    nccl: str | None
    ib: str | None  # the ib section's mark text, ``${dev}`` still in it
    ib_var: str = "dev"

    @property
    def run_level(self) -> int:
        m = re.search(r"-r\s*(\d)", self.dcgm or "")
        return int(m.group(1)) if m else 2


def read_script(script: str) -> ScriptPlan:
    banner: list[str] = []
    dcgm = nccl = ib = None
    ib_var = "dev"
    for line in script.splitlines():
        m = _ECHO.match(line)
        if not m:
            continue
        text = m.group(1)
        if not text.startswith(MARK):
            if dcgm is None and nccl is None:
                banner.append(text)
            continue
        body = text[len(MARK) :]
        if body.startswith("dcgm: "):
            dcgm = body[len("dcgm: ") :]
        elif body.startswith("nccl: "):
            nccl = body[len("nccl: ") :]
        elif body.startswith("ib "):
            ib = body
            v = _VAR.search(body)
            if v:
                ib_var = v.group(1) or v.group(2)
    return ScriptPlan(tuple(banner), dcgm, nccl, ib, ib_var)


def expand(text: str, env: dict[str, str]) -> str:
    """``$X``/``${X}`` replaced as bash would (unset: empty; ``set -u`` aside)."""
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text)


def container_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment: its values, and the downward API's ``fieldRef``s."""
    out: dict[str, str] = {}
    fields = {
        "spec.nodeName": str(spec_of(pod).get("nodeName") or ""),
        "metadata.name": str(meta_of(pod).get("name") or ""),
        "metadata.namespace": str(meta_of(pod).get("namespace") or ""),
        "metadata.uid": str(meta_of(pod).get("uid") or ""),
        "status.podIP": str(status_of(pod).get("podIP") or ""),
        "status.hostIP": str(status_of(pod).get("hostIP") or ""),
    }
    for e in container.get("env") or []:
        name = str(e.get("name") or "")
        if "value" in e:
            out[name] = expand(str(e.get("value") or ""), out)
            continue
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref in fields:
            out[name] = fields[str(ref)]
    return out


# -- what the hardware shows ----------------------------------------------------------------


@dataclass(frozen=True)
class GpuState:
    index: int
    name: str = "NVIDIA H200"
    bus: int = 0x18
    device_id: str = "2335"
    lost: bool = False
    dbe: int = 0  # volatile uncorrectable ECC errors
    remap_pending: bool = False
    links_down: tuple[int, ...] = ()
    nvlink_errors: bool = False  # error counters climbing (an nvlink-errors fault)
    stress_c: float = 60.0  # the temperature it reaches under the stress


@dataclass(frozen=True)
class PortState:
    device: str
    up: bool = True


@dataclass(frozen=True)
class NodeState:
    name: str
    gpus: tuple[GpuState, ...]
    ports: tuple[PortState, ...] = ()
    driver: str = "570.124.06"

    @property
    def hot(self) -> list[GpuState]:
        return [g for g in self.gpus if not g.lost and g.stress_c >= HOT_C]


def read_node(devices: Any, node: str, now: float) -> NodeState | None:
    """The node's hardware as the device service models it, or None without devices."""
    if devices is None:
        return None
    try:
        nd = devices.node(node)
    except KeyError:
        return None
    with devices.lock:
        faulty = {g for g, _link in nd.nvlink_faults.values()}
        gpus = []
        for i, gpu in enumerate(nd.gpus):
            model = nd.models[i]
            if model.hot_target_c is not None:
                stress = float(model.hot_target_c)
            else:
                stress = max(float(gpu.temperature_c), model.steady_state(STRESS_W, now))
            bus = gpu.pci_bus_id.split(":")
            gpus.append(
                GpuState(
                    index=i,
                    name=str(gpu.name),
                    bus=int(bus[1], 16) if len(bus) > 1 else 0,
                    device_id=f"{(gpu.pci_device_id >> 16) & 0xFFFF:04x}",
                    lost=bool(gpu.lost),
                    dbe=int(gpu.ecc_uncorrected_volatile),
                    remap_pending=bool(gpu.remapped_rows[2]),
                    links_down=tuple(j for j, nl in enumerate(gpu.nvlinks) if not nl.active),
                    nvlink_errors=i in faulty,
                    stress_c=stress,
                )
            )
        ports = tuple(PortState(p.device, bool(p.up)) for p in nd.ib.ports)
        driver = str(getattr(nd.nvml, "driver_version", "") or "570.124.06")
    return NodeState(node, tuple(gpus), ports, driver)


# -- dcgmi diag --------------------------------------------------------------------------------

_DIAG_HEADER = (
    "+---------------------------+------------------------------------------------+",
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
)
_FOOTER = "+---------------------------+------------------------------------------------+"
_METADATA = "|-----  Metadata  ----------+------------------------------------------------|"
_DEPLOYMENT = "|-----  Deployment  --------+------------------------------------------------|"
_INTEGRATION = "+-----  Integration  -------+------------------------------------------------+"
_HARDWARE = "+-----  Hardware  ----------+------------------------------------------------+"
_STRESS = "+-----  Stress  ------------+------------------------------------------------+"
_DEPLOYMENT_TESTS = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
INFO_WIDTH = 45  # Diag.cpp's DATA_INFO_TAG_LEN


def _row(name: str, info: str) -> str:
    return f"| {name:<25} | {info:<46} |"


def _wrapped(name: str, text: str) -> list[str]:
    """A Warning/Info row as Diag.cpp's DisplayVerboseInfo splits it: 45 characters a
    row, the name only on the first."""
    return [
        _row(name if i == 0 else "", text[i : i + INFO_WIDTH])
        for i in range(0, max(len(text), 1), INFO_WIDTH)
    ]


def _gpu_list(indices: Sequence[int]) -> str:
    return ("GPU: " if len(indices) == 1 else "GPUs: ") + ", ".join(str(i) for i in indices)


def _test_rows(name: str, gpus: Sequence[int], failures: dict[int, list[str]]) -> list[str]:
    """One test's rows (HelperDisplayGpuResults): ``Pass - All``, ``Fail - All``, or the
    passing GPUs then the failing ones on a continuation row, then every warning."""
    failed = [g for g in gpus if g in failures]
    passed = [g for g in gpus if g not in failures]
    if not failed:
        return [_row(name, "Pass - All")]
    rows: list[str] = []
    if not passed:
        rows.append(_row(name, "Fail - All"))
    else:
        rows.append(_row(name, f"Pass - {_gpu_list(passed)}"))
        rows.append(_row("", f"Fail - {_gpu_list(failed)}"))
    for g in failed:
        for text in failures[g]:
            rows += _wrapped("Warning", f"GPU {g} {text}")
    return rows


def dcgm_output(state: NodeState, run_level: int, duration_s: float) -> tuple[list[str], int]:
    """``dcgmi diag -r run_level``'s output for the node, and its exit code."""
    gpus = [g.index for g in state.gpus]
    by = {g.index: g for g in state.gpus}
    lines = ["Successfully ran diagnostic for group.", *_DIAG_HEADER, _METADATA]
    ids = ",".join(g.device_id for g in state.gpus)
    lines += [
        _row("DCGM Version", DCGM_VERSION),
        _row("Driver Version Detected", state.driver),
        _row("GPU Device IDs Detected", ids[:INFO_WIDTH]),
        _DEPLOYMENT,
    ]
    failed_any = False
    remap = [g for g in state.gpus if g.remap_pending and not g.lost]
    for test in _DEPLOYMENT_TESTS:
        if test == "Page Retirement/Row Remap" and remap:
            failed_any = True
            lines.append(_row(test, "Fail"))
            for g in remap:
                lines += _wrapped(
                    "Warning", f"GPU {g.index} had memory errors and row remappings are pending"
                )
        else:
            lines.append(_row(test, "Pass"))

    def lost(g: GpuState) -> list[str]:
        return ["failed to create a CUDA context: 'GPU is lost'"] if g.lost else []

    thermal_test = "Memory Bandwidth" if run_level < 3 else "Targeted Power"
    seconds = max(duration_s, 1.0)

    def hot(g: GpuState) -> list[str]:
        if g.lost or g.stress_c < HOT_C:
            return []
        start = round(min(0.1 * seconds, 30.0), 1)
        total = round(max(seconds - start, 1.0) * min(1.0, 0.5 + (g.stress_c - HOT_C) / 20), 1)
        return [
            f"Thermal violations totaling {total:.1f} seconds started at {start:.1f} "
            f"seconds into the test for GPU {g.index}",
            f"Clocks are being throttled for GPU {g.index} because of clock throttling "
            f"starting {start:.1f} seconds into the test. 'HW Thermal Slowdown' and "
            f"'SW Thermal Slowdown' (temperature {round(g.stress_c)} C)",
        ]

    def failures(test: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for i in gpus:
            g = by[i]
            why = lost(g)
            if not why and test == "GPU Memory" and g.dbe:
                why = [f"Detected {g.dbe} volatile double-bit ECC error(s) in GPU {i}."]
            if not why and test == "PCIe" and g.links_down:
                why = [f"GPU {i}'s NvLink link {link} is currently down" for link in g.links_down]
            if not why and test == thermal_test:
                why = hot(g)
            if why:
                out[i] = why
        return out

    sections: list[tuple[str, tuple[str, ...]]] = [
        (_INTEGRATION, ("PCIe",)),
        (_HARDWARE, ("GPU Memory", "Diagnostic") if run_level >= 3 else ("GPU Memory",)),
        (
            _STRESS,
            ("Targeted Stress", "Targeted Power", "Memory Bandwidth")
            if run_level >= 3
            else ("Memory Bandwidth",),
        ),
    ]
    for header, tests in sections:
        lines.append(header)
        for test in tests:
            fails = failures(test)
            failed_any = failed_any or bool(fails)
            lines += _test_rows(test, gpus, fails)
    lines.append(_FOOTER)
    return lines, DCGM_FAIL_EXIT if failed_any else 0


# -- all_reduce_perf ---------------------------------------------------------------------------

_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.I)


def _bytes(text: str, default: int) -> int:
    m = _SIZE.match(text or "")
    if not m:
        return default
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def _flag(words: Sequence[str], flag: str, default: str) -> str:
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            return words[i + 1]
    return default


def _time_str(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def nccl_output(
    state: NodeState, command: str, busbw_gbps: float, rng: random.Random
) -> tuple[list[str], int]:
    """``all_reduce_perf``'s output on the node, and its exit code."""
    words = shlex.split(command)
    lo = _bytes(_flag(words, "-b", "8"), 8)
    hi = _bytes(_flag(words, "-e", "8G"), 8 << 30)
    factor = max(int(_flag(words, "-f", "2") or 2), 2)
    n = int(_flag(words, "-g", str(len(state.gpus))) or len(state.gpus))
    host = state.name
    pid = 30 + rng.randrange(200)
    lines = [
        f"# nThread 1 nGpus {n} minBytes {lo} maxBytes {hi} step: {factor}(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    visible = [g for g in state.gpus if not g.lost]
    for rank, g in enumerate(visible[:n]):
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {g.index:2d} "
            f"[0x{g.bus:02x}] {g.name}"
        )
    if len(visible) < n or n > len(state.gpus):
        lines += [
            f"{host}: Test NCCL failure common.cu:1005 'unhandled cuda error (run with "
            "NCCL_DEBUG=INFO for details) / '",
            f" .. {host} pid {pid}: Test failure common.cu:891",
        ]
        return lines, NCCL_FAIL_EXIT
    lines += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw"
        " #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)       ",
    ]
    degraded = any(g.nvlink_errors or g.links_down for g in state.gpus)
    target = busbw_gbps * (DEGRADED_NVLINK if degraded else 1.0) * (1.0 + 0.01 * rng.uniform(-1, 1))
    ring = 2.0 * (n - 1) / n if n > 1 else 1.0
    latency_us = 38.0 + 8.0 * rng.random()
    # time = latency + size / A, with A chosen so that the largest size reaches `target`
    denom = ring * hi / (target * 1e3) - latency_us  # us at the largest size, less latency
    alg_bytes_per_us = hi / max(denom, 1.0)
    total_busbw, rows = 0.0, 0
    size = lo
    while size <= hi:
        count = max(size // 4, 1)
        cells = []
        for _ in range(2):
            us = (latency_us + size / alg_bytes_per_us) * (1.0 + 0.004 * rng.uniform(-1, 1))
            algbw = size / us / 1e3
            busbw = algbw * ring
            cells.append(f"  {_time_str(us)}  {algbw:6.2f}  {busbw:6.2f}  {0:5d}")
        total_busbw += busbw
        rows += 1
        lines.append(f"{size:12d}  {count:12d}  {'float':>8}  {'sum':>6}  {-1:6d}" + "".join(cells))
        size *= factor
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {total_busbw / max(rows, 1):.4g} ",
        "#",
    ]
    return lines, 0


# -- ib_write_bw -------------------------------------------------------------------------------

_DASHES = "-" * 87


def ib_output(
    port: PortState, command: str, gbps: float, rng: random.Random
) -> tuple[list[str], int]:
    """perftest's ``ib_write_bw`` client output on ``port``, and its exit code."""
    if not port.up:
        return [" Port number 1 state is Down", " Couldn't set the link layer"], PERFTEST_FAIL_EXIT
    words = shlex.split(command)
    duration = float(_flag(words, "-D", "5") or 5)
    size = 65536
    bw = gbps * (1.0 + 0.003 * rng.uniform(-1, 1))
    iterations = int(bw * 1e9 / 8 / size * duration)
    rate = bw * 1e9 / 8 / size / 1e6

    def addr() -> str:
        return (
            f"LID 0x{rng.randrange(1, 0x400):02x} QPN 0x{rng.randrange(0x100, 0x10000):04x} "
            f"PSN 0x{rng.randrange(1 << 24):06x} RKey 0x{rng.randrange(1 << 24):06x} "
            f"VAddr 0x{0x7F0000000000 + rng.randrange(1 << 36) * 4096:014x}"
        )

    lines = [
        _DASHES,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {port.device}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
        " TX depth        : 128",
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        " Link type       : IB",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        _DASHES,
        f" local address: {addr()}",
        f" remote address: {addr()}",
        _DASHES,
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
        f" {size:<10d} {iterations:<16d} {0.0:.2f}               {bw:.2f} \t\t   {rate:.6f}",
        _DASHES,
    ]
    return lines, 0


# -- the actor ---------------------------------------------------------------------------------


def _say(lines: list[str]) -> Callable[[], list[str]]:
    return lambda: lines


@dataclass
class _Run:
    """One validation container being played: its schedule, in wall seconds."""

    uid: str
    cid: str
    node: str
    plan: ScriptPlan
    env: dict[str, str]
    started: float  # wall
    steps: list[tuple[float, Callable[[], list[str]]]] = field(default_factory=list)
    done: int = 0
    rc: int = 0
    finished: bool = False


class ValidationActor(Actor):
    """Plays every running validation container (``dcgmi diag`` in its command)."""

    name = "validation"

    def __init__(self, world: World) -> None:
        super().__init__(world)
        extra = world.config.extra
        speed = world.config.speed
        self.period_s = float(extra.get("validation_period_s", max(1.0, 0.25 * speed)))
        self.dcgm_s = {
            2: float(extra.get("validation_dcgm_r2_s", 120.0)),
            3: float(extra.get("validation_dcgm_r3_s", 900.0)),
        }
        self.nccl_s = float(extra.get("validation_nccl_s", 60.0))
        self.ib_s = float(extra.get("validation_ib_s", 15.0))
        self.busbw = float(extra.get("validation_busbw_gbps", BUSBW_GBPS))
        self.ib_gbps = float(extra.get("validation_ib_gbps", IB_GBPS))
        self.store = podlogs.for_state(world.state_dir)
        self.core: Any = client.CoreV1Api(world.client)
        self.runs: dict[str, _Run] = {}  # container ID -> its run

    def _pods(self) -> list[dict[str, Any]]:
        view = self.world.services.get("cluster-view")
        if view is not None:
            return list(view.pods())
        resp = self.core.list_pod_for_all_namespaces(
            field_selector="status.phase=Running", _preload_content=False
        )
        return list(json.loads(resp.data).get("items") or [])

    def tick(self) -> None:
        live: set[str] = set()
        for pod in self._pods():
            if status_of(pod).get("phase") != "Running" or meta_of(pod).get("deletionTimestamp"):
                continue
            for container in spec_of(pod).get("containers") or []:
                if not is_validation(container):
                    continue
                cs = next(
                    (
                        s
                        for s in status_of(pod).get("containerStatuses") or []
                        if s.get("name") == container.get("name")
                    ),
                    None,
                )
                running = ((cs or {}).get("state") or {}).get("running")
                if not cs or not cs.get("containerID") or running is None:
                    continue
                cid = str(cs["containerID"])
                live.add(cid)
                run = self.runs.get(cid)
                if run is None:
                    run = self.runs[cid] = self._start(pod, container, cid, running)
                self._advance(run)
        for cid in [c for c in self.runs if c not in live]:
            del self.runs[cid]

    def _start(
        self, pod: dict[str, Any], container: dict[str, Any], cid: str, running: dict[str, Any]
    ) -> _Run:
        words = [*(container.get("command") or []), *(container.get("args") or [])]
        script = next((str(w) for w in words if _DCGM.search(str(w))), "")
        started = parse_time(str(running.get("startedAt") or "")) or self.clock.wall()
        run = _Run(
            uid=str(meta_of(pod).get("uid")),
            cid=cid,
            node=str(spec_of(pod).get("nodeName") or ""),
            plan=read_script(script),
            env=container_env(pod, container),
            started=started,
        )
        run.steps = self._schedule(run)
        return run

    def _rng(self, run: _Run, what: str) -> random.Random:
        return random.Random(f"{self.world.config.seed}:{run.node}:{run.uid}:{what}")

    def _state(self, run: _Run) -> NodeState:
        state = read_node(self.world.services.get("devices"), run.node, self.clock.time())
        if state is None:  # a world without devices: a healthy node of the configured shape
            cfg = self.world.config
            state = NodeState(
                run.node,
                tuple(GpuState(i, bus=0x18 + 0x11 * i) for i in range(cfg.gpus_per_node)),
                tuple(PortState(f"mlx5_{h}") for h in range(cfg.hcas_per_node)),
            )
        return state

    def _schedule(self, run: _Run) -> list[tuple[float, Callable[[], list[str]]]]:
        """The script as (wall time, what it prints then) steps."""
        plan, env = run.plan, run.env
        wall = self.clock.to_wall
        t = run.started
        steps: list[tuple[float, Callable[[], list[str]]]] = []
        opening = [expand(b, env) for b in plan.banner]
        if plan.dcgm is not None:
            opening.append(f"{MARK}dcgm: {plan.dcgm}")
        steps.append((t, _say(opening)))
        if plan.dcgm is not None:
            dcgm_s = self.dcgm_s.get(plan.run_level, self.dcgm_s[3 if plan.run_level > 3 else 2])
            t += wall(dcgm_s)

            def dcgm() -> list[str]:
                lines, code = dcgm_output(self._state(run), plan.run_level, dcgm_s)
                return [*lines, *self._exit(run, code)]

            steps.append((t, dcgm))
        if plan.nccl is not None:
            nccl_cmd = plan.nccl
            steps.append((t, _say([f"{MARK}nccl: {nccl_cmd}"])))
            t += wall(self.nccl_s)

            def nccl() -> list[str]:
                rng = self._rng(run, "nccl")
                lines, code = nccl_output(self._state(run), nccl_cmd, self.busbw, rng)
                return [*lines, *self._exit(run, code)]

            steps.append((t, nccl))
        if plan.ib is not None:
            ib_mark = plan.ib
            for port in sorted(self._state(run).ports, key=lambda p: p.device):
                dev_env = {**env, plan.ib_var: port.device}
                mark = expand(ib_mark, dev_env)
                command = mark.split(": ", 1)[1] if ": " in mark else mark
                steps.append((t, _say([f"{MARK}{mark}"])))
                t += wall(2.0 + self.ib_s)

                def ib(device: str = port.device, command: str = command) -> list[str]:
                    state = self._state(run)
                    now = next((p for p in state.ports if p.device == device), PortState(device))
                    rng = self._rng(run, f"ib:{device}")
                    lines, code = ib_output(now, command, self.ib_gbps, rng)
                    return [*lines, *self._exit(run, code)]

                steps.append((t, ib))
        steps.append((t, _say([f"{MARK}done"])))
        return steps

    @staticmethod
    def _exit(run: _Run, code: int) -> list[str]:
        if code != 0:
            run.rc = SCRIPT_FAIL_EXIT
        return [f"{MARK}exit {code}"]

    def _advance(self, run: _Run) -> None:
        now = self.clock.wall()
        while run.done < len(run.steps) and run.steps[run.done][0] <= now:
            at, say = run.steps[run.done]
            run.done += 1
            lines = say()
            # bash writes each line as it comes: spread them over the step's moment
            self.store.write(run.cid, [(at, text) for text in lines], seed=lambda: [])
        if run.done >= len(run.steps) and not run.finished:
            run.finished = True
            exits = self.world.services.get(EXITS_SERVICE)
            if exits is not None:
                exits.exited(run.uid, run.rc)
