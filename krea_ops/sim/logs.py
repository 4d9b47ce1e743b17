"""Container logs for the simulated cluster: what ``kubectl logs`` reads.

A real kubelet keeps each container's stdout/stderr in a file per container instance
(the CRI's log path, named by container ID) and the API server's ``pods/{name}/log``
proxies to it. Here the world's actors (the trainers, ``krea_ops.sim.world.logs``) and
the API server share one :class:`LogStore` per state directory (:func:`for_state`): the
actors append lines to the instance named by the pod status' ``containerID``, the server
reads them. Choosing the instance follows the kubelet's ``validateContainerLogStatus``
(kubelet_pods.go): the running or terminated container, or with ``previous`` the one in
``lastState.terminated``.

Memory is bounded: a ring of ``max_lines`` lines per container instance and at most
``max_containers`` instances (the least recently written go first). A container that was
never written to starts with a few lines its image would print (:func:`banner`), stamped
when it started, so every running pod has believable logs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krea_ops.kube import times

MAX_LINES = 1000
MAX_CONTAINERS = 1024


@dataclass(frozen=True, slots=True)
class Line:
    t: float  # wall-clock seconds, when the container wrote it
    text: str
    seq: int  # position in the instance's whole output (for follow)


class LogStore:
    """Rings of log lines by container ID, shared by writers and the API server."""

    def __init__(self, max_lines: int = MAX_LINES, max_containers: int = MAX_CONTAINERS) -> None:
        self.max_lines = max_lines
        self.max_containers = max_containers
        self._rings: OrderedDict[str, deque[Line]] = OrderedDict()
        self._seq: dict[str, int] = {}
        self._cond = threading.Condition()

    def _ring(self, cid: str, seed: Callable[[], list[tuple[float, str]]] | None) -> deque[Line]:
        ring = self._rings.get(cid)
        if ring is None:
            ring = self._rings[cid] = deque(maxlen=self.max_lines)
            self._seq[cid] = 0
            while len(self._rings) > self.max_containers:
                old, _ = self._rings.popitem(last=False)
                self._seq.pop(old, None)
            for t, text in seed() if seed else []:
                self._add(cid, ring, t, text)
        else:
            self._rings.move_to_end(cid)
        return ring

    def _add(self, cid: str, ring: deque[Line], t: float, text: str) -> None:
        for part in text.split("\n"):
            self._seq[cid] += 1
            ring.append(Line(t, part, self._seq[cid]))

    def write(
        self,
        cid: str,
        lines: list[tuple[float, str]],
        seed: Callable[[], list[tuple[float, str]]] | None = None,
    ) -> None:
        """Append ``(wall time, text)`` lines (text may hold several) to ``cid``; a new
        instance starts with ``seed()``."""
        if not cid:
            return
        with self._cond:
            ring = self._ring(cid, seed)
            for t, text in lines:
                self._add(cid, ring, t, text)
            self._cond.notify_all()

    def read(
        self, cid: str, seed: Callable[[], list[tuple[float, str]]] | None = None
    ) -> list[Line]:
        with self._cond:
            if cid not in self._rings and seed is None:
                return []
            return list(self._ring(cid, seed))

    def after(self, cid: str, seq: int) -> list[Line]:
        """The lines of ``cid`` written after position ``seq`` (those still in the ring)."""
        with self._cond:
            ring = self._rings.get(cid)
            if not ring or ring[-1].seq <= seq:
                return []
            return [line for line in ring if line.seq > seq]

    def wait(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


_STORES: dict[str, LogStore] = {}
_STORES_LOCK = threading.Lock()


def for_state(state_dir: Path | str | None) -> LogStore:
    """The store of the cluster whose state lies in ``state_dir`` (a private one for
    None): the world and the API server of one cluster find the same store."""
    if state_dir is None:
        return LogStore()
    key = str(Path(state_dir).resolve())
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = LogStore()
        return store


def forget(state_dir: Path | str | None) -> None:
    """Drop the store of a cluster that is closed."""
    if state_dir is None:
        return
    with _STORES_LOCK:
        _STORES.pop(str(Path(state_dir).resolve()), None)


# -- formatting ---------------------------------------------------------------------------


def rfc3339_nano(t: float) -> str:
    """The CRI log timestamp ``--timestamps`` prints: RFC 3339 with nanoseconds."""
    moment = dt.datetime.fromtimestamp(t, dt.UTC)
    nanos = min(round((t - int(t)) * 1e9), 999_999_999)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos:09d}Z"


def glog_prefix(severity: str, t: float, pid: int) -> str:
    """``I1202 00:41:13.123456    1234 `` (klog/glog, as PyTorch's c10 logging writes)."""
    moment = dt.datetime.fromtimestamp(t, dt.UTC)
    return f"{severity}{moment:%m%d %H:%M:%S}.{moment.microsecond:06d} {pid} "


def started_at(status: dict[str, Any], fallback: float) -> float:
    """When the container instance started (its ``state.running.startedAt``)."""
    state = status.get("state") or {}
    for key in ("running", "terminated"):
        stamp = (state.get(key) or {}).get("startedAt")
        if stamp:
            parsed = times.parse_time(str(stamp))
            if parsed is not None:
                return parsed
    return fallback


def banner(pod: dict[str, Any], container: str, image: str, t: float) -> list[tuple[float, str]]:
    """The first lines a container of ``image`` prints when it starts."""
    name = (pod.get("metadata") or {}).get("name", "")
    node = (pod.get("spec") or {}).get("nodeName", "")
    lines: list[str]
    if "k8s-device-plugin" in image:
        version = image.rpartition(":")[2] or "v0.17.0"
        lines = [
            glog_prefix("I", t, 1) + "main.go:235] \"Starting NVIDIA Device Plugin\" "
            f"version=<\n\t{version}\n >",
            glog_prefix("I", t, 1) + "main.go:238] Starting FS watcher for "
            "/var/lib/kubelet/device-plugins",
            glog_prefix("I", t, 1) + "main.go:245] Starting OS watcher.",
            glog_prefix("I", t, 1) + "main.go:356] Retrieving plugins.",
            glog_prefix("I", t, 1) + "server.go:195] Starting GRPC server for "
            "'nvidia.com/gpu'",
            glog_prefix("I", t, 1) + "server.go:139] Starting to serve 'nvidia.com/gpu' on "
            "/var/lib/kubelet/device-plugins/nvidia-gpu.sock",
            glog_prefix("I", t, 1) + "server.go:146] Registered device plugin for "
            "'nvidia.com/gpu' with Kubelet",
        ]
    elif "krea-ops" in image:
        lines = [
            f"time=\"{rfc3339_nano(t)[:19]}Z\" level=info msg=\"krea-ops exporter starting\" "
            f"node={node}",
            f"time=\"{rfc3339_nano(t)[:19]}Z\" level=info msg=\"serving metrics\" "
            "address=:9400 path=/metrics",
        ]
    elif container == "trainer" or "dit" in image:
        w = glog_prefix("W", t, 1) + "torch/distributed/run.py:792] "
        stars = "*" * 41
        lines = [
            w,
            w + stars,
            w + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
            "default, to avoid your system being overloaded, please further tune the variable "
            "for optimal performance in your application as needed. ",
            w + stars,
        ]
    else:
        lines = [f"{rfc3339_nano(t)[:19]}Z INFO starting {image} in pod {name}"]
    return [(t, line) for line in lines]


def since_filter(lines: list[Line], since: float | None) -> list[Line]:
    if since is None:
        return lines
    return [line for line in lines if line.t >= since]


def render(lines: list[Line], timestamps: bool) -> bytes:
    if timestamps:
        return "".join(f"{rfc3339_nano(x.t)} {x.text}\n" for x in lines).encode()
    return "".join(f"{x.text}\n" for x in lines).encode()


def now() -> float:
    return time.time()
