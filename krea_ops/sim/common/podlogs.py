"""Container logs for the simulated cluster: what ``kubectl logs`` reads.

A real kubelet keeps each container's stdout/stderr in a file per container instance
(the CRI's log path, named by container ID) and the API server's ``pods/{name}/log``
proxies to it. Here the world's actors (the trainers, ``krea_ops.sim.machines.logs``) and
the API server share one :class:`LogStore` per state directory (:func:`for_state`): the
actors append lines to the instance named by the pod status' ``containerID``, the server
reads them. Choosing the instance follows the kubelet's ``validateContainerLogStatus``
(kubelet_pods.go): the running or terminated container, or with ``previous`` the one in
``lastState.terminated``.

Memory is bounded: a ring of ``max_lines`` lines per container instance and at most
``max_containers`` instances (the least recently written go first). A container that was
never written to starts with a few lines its image would print (:func:`banner`), stamped
when it started, so every running pod has believable logs.

:func:`container_log` is what both readers serve: given a pod, a container and the
:class:`LogOptions`, the instance's text (or a stream of it with ``follow``). The embedded
API server's ``pods/{name}/log`` calls it after its own ``PodLogOptions`` checks; the
simulated kubelet's ``/containerLogs/{ns}/{pod}/{container}``
(``krea_ops.sim.machines.kubelet_server``), which the upstream kube-apiserver proxies
``pods/log`` to, calls it after the kubelet's.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
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
            f'time="{times.nano_time(t)[:19]}Z" level=info msg="krea-ops exporter starting" '
            f"node={node}",
            f'time="{times.nano_time(t)[:19]}Z" level=info msg="serving metrics" '
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
        lines = [f"{times.nano_time(t)[:19]}Z INFO starting {image} in pod {name}"]
    return [(t, line) for line in lines]


def since_filter(lines: list[Line], since: float | None) -> list[Line]:
    if since is None:
        return lines
    return [line for line in lines if line.t >= since]


def render(lines: list[Line], timestamps: bool) -> bytes:
    if timestamps:
        return "".join(f"{times.nano_time(x.t)} {x.text}\n" for x in lines).encode()
    return "".join(f"{x.text}\n" for x in lines).encode()


def now() -> float:
    return time.time()


# -- serving a container's log ------------------------------------------------------------


class ContainerLogError(Exception):
    """No log to serve for this container: the kubelet's ``validateContainerLogStatus``
    refusals (pkg/kubelet/kubelet_pods.go), e.g. ``previous terminated container %q in pod
    %q not found``. The kubelet answers them with 400 and the text as the body
    (``response.WriteError(http.StatusBadRequest, err)`` in pkg/kubelet/server/server.go
    ``getContainerLogs``), which kube-apiserver's ``GenericHttpResponseChecker`` turns into
    a 400 BadRequest Status with that message."""


@dataclass(frozen=True, slots=True)
class LogOptions:
    """The ``PodLogOptions`` that reach the log, already validated by the caller
    (``container`` aside: it is an argument of :func:`container_log`)."""

    previous: bool = False
    since_seconds: int | None = None
    since_time: str | None = None  # RFC 3339, as the query carries it
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    follow: bool = False


PodFetch = Callable[[], dict[str, Any] | None]


def container_log(
    store: LogStore,
    pod: dict[str, Any],
    container: str,
    options: LogOptions,
    *,
    current: PodFetch,
    closing: threading.Event,
) -> bytes | Iterator[bytes]:
    """The log of ``container`` of ``pod`` (a pod object, its status as read now):
    the whole answer as bytes, or with ``follow`` on a running instance an iterator of
    chunks (what is there, then each line as it is written) that ends when the instance
    stops running, ``current()`` (the pod as it is now, None once gone; called about once
    a second) says so, or ``closing`` is set; it yields ``b""`` about every second, so a
    server can notice a client that went away.

    The instance is the kubelet's choice (``validateContainerLogStatus``): with
    ``previous`` the one in ``lastState.terminated``, else the running one, else the
    terminated one (or the one before it when that never started). The refusals raise
    :class:`ContainerLogError` worded as the kubelet words them. A container instance
    nobody wrote to yet starts with its image's :func:`banner`. ``since_*`` keep the lines
    written at or after that time, ``tail_lines`` the last N of those, ``limit_bytes``
    cuts the rendered text (and answers at once, even with ``follow``)."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    status = pod.get("status") or {}
    statuses = (status.get("containerStatuses") or []) + (
        status.get("initContainerStatuses") or []
    )
    cs = next((c for c in statuses if c.get("name") == container), None)
    if cs is None:
        raise ContainerLogError(f'container "{container}" in pod "{name}" is not available')
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    previous = options.previous
    if previous:
        if not last or not last.get("containerID"):
            raise ContainerLogError(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        cid = str(last["containerID"])
    elif state.get("running") is not None:
        cid = str(cs.get("containerID") or "")
    elif state.get("terminated") is not None:
        cid = str(state["terminated"].get("containerID") or cs.get("containerID") or "")
        if not cid and last and last.get("containerID"):
            cid = str(last["containerID"])
        if not cid:
            raise ContainerLogError(f'container "{container}" in pod "{name}" is terminated')
    elif last and last.get("containerID"):
        cid = str(last["containerID"])
    else:
        reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        raise ContainerLogError(
            f'container "{container}" in pod "{name}" is waiting to start: {reason}'
        )
    if not cid:  # a status without a container ID: one ring per pod and container
        cid = f"{(pod.get('metadata') or {}).get('uid')}/{container}"
    image = str(cs.get("image") or "")
    started = started_at(cs if not previous else {"state": {"terminated": last}}, now())
    seed = None if previous else (lambda: banner(pod, container, image, started))
    lines = store.read(cid, seed)
    end_seq = lines[-1].seq if lines else 0
    since: float | None = None
    if options.since_seconds is not None:
        since = now() - options.since_seconds
    elif options.since_time is not None:
        since = times.parse_time(options.since_time)
        if since is None:
            raise ContainerLogError(f"invalid value for sinceTime: {options.since_time!r}")
    shown = since_filter(lines, since)
    tail = options.tail_lines
    if tail is not None:
        shown = shown[-tail:] if tail else []
    body = render(shown, options.timestamps)
    if options.limit_bytes is not None:
        body = body[: options.limit_bytes]
    follow = options.follow and not previous
    if not follow or state.get("running") is None or options.limit_bytes is not None:
        return body
    return follow_log(store, cid, body, end_seq, options.timestamps, current, closing)


def instance_running(pod: dict[str, Any] | None, cid: str) -> bool:
    """Whether the container instance ``cid`` is running in ``pod`` (None: gone)."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return any(
        c.get("containerID") == cid and (c.get("state") or {}).get("running") for c in statuses
    )


def follow_log(
    store: LogStore,
    cid: str,
    first: bytes,
    seq: int,
    timestamps: bool,
    current: PodFetch,
    closing: threading.Event,
) -> Iterator[bytes]:
    """``follow=true``: what is there, then each line as it is written, until the
    container instance stops running (or the pod goes, or ``closing`` is set)."""
    yield first
    checked = time.monotonic()
    while not closing.is_set():
        new = store.after(cid, seq)
        if new:
            seq = new[-1].seq
            yield render(new, timestamps)
        if time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            if not instance_running(current(), cid):
                rest = store.after(cid, seq)
                if rest:
                    yield render(rest, timestamps)
                return
        store.wait(1.0)
        yield b""  # lets the HTTP layer notice a client that went away
