"""A fake NVML backend: NVIDIA's pynvml API, answered by simulated GPUs.

``FakeNvml`` has the same function names and signatures as the ``pynvml`` module
(nvidia-ml-py) for the subset that ``krea_ops.exporters.nvml`` calls, and behaves the
way NVML does on real hardware, so the GPU collector runs unchanged on a machine with
no GPU:

* it returns pynvml's own ctypes structures (``nvmlPciInfo_t`` whose ``busId`` is
  bytes, arrays of ``c_nvmlFieldValue_t`` with a per-field ``nvmlReturn``,
  ``c_nvmlEventData_t``, ``c_nvmlGpmSupport_t``, ``c_nvmlUtilization_t``, ...);
* device handles are real ``pynvml.c_nvmlDevice_t`` pointers, GPM samples real
  ``c_nvmlGpmSample_t`` pointers and event sets real ``c_nvmlEventSet_t`` pointers
  (each points at a small buffer the fake owns and is looked up by its address);
* it raises pynvml's own exception classes (``pynvml.NVMLError(code)``, which maps
  the code to ``NVMLError_GpuIsLost``, ``NVMLError_NotSupported``, ...), including
  ``NVMLError_Uninitialized`` before ``nvmlInit`` and after the last ``nvmlShutdown``.

The narrow interface is ``krea_ops.exporters.nvml.NVML_FUNCTIONS`` (the exact list of
pynvml functions the collector calls); FakeNvml implements every one of them, plus
``nvmlInit``. Anything else of pynvml that is not a function (constants, structures,
exception classes) is delegated to pynvml by ``FakeNvml.__getattr__``; asking for a
pynvml *function* the fake does not implement raises AttributeError, so widening the
collector's interface without widening the fake fails loudly.

Each GPU is a ``FakeGpu``: a mutable, thread-safe state object a test or a cluster
simulator changes while the collector reads it (``gpu.temperature_c = 91``,
``gpu.lost = True``, ``gpu.update(tensor_active=0.05, util_percent=100)``).

GPM is honest: a FakeGpu keeps cumulative integrals of its per-pipe activity rates
(fraction of time x seconds), advanced with its clock (``time.monotonic`` unless a
simulator passes its own) at the rate in force at the time; changing a rate first
closes the integral at the old rate. ``nvmlGpmSampleGet`` snapshots the integrals with a
timestamp and ``nvmlGpmMetricsGet`` returns 100 x (difference of integrals) / (difference
of timestamps), so a new rate shows only in a sample pair taken after the change.
Energy (``nvmlDeviceGetTotalEnergyConsumption``) is the integral of ``power_w``.

Utilization is honest the same way: ``nvmlDeviceGetUtilizationRates`` is the percent of
time over the driver's last sample period (NVML: "between 1 second and 1/6 second,
depending on the product"; ``FakeGpu.utilization_period_s``, 1/6 s of the GPU's clock),
so busy time and GPM activity cover different windows, as they do on a real GPU: a GPU
whose load drops between the two can read more SM activity than busy time.
``FakeNvml.gpm_reported_since`` says how far back the GPM readings can reach, for a
simulator that must keep its readings consistent across the two windows.

``FakeGpu.unsupported`` makes calls answer NotSupported the way a GPU that lacks a
feature does. Its entries are:

* a function name, e.g. ``"nvmlDeviceGetTotalEccErrors"``: every call raises
  ``NVMLError_NotSupported``;
* a tuple of a function name and its integer arguments after the handle, e.g.
  ``("nvmlDeviceGetNvLinkErrorCounter", 7, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)`` or
  ``("nvmlDeviceGetTemperatureThreshold", pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX)``:
  only that call raises;
* ``("nvmlDeviceGetFieldValues", field_id)``: that field comes back with
  ``nvmlReturn == NVML_ERROR_NOT_SUPPORTED`` inside the array (the call succeeds);
* ``("nvmlGpmMetricsGet", metric_id)``: that GPM metric comes back with
  ``nvmlReturn == NVML_ERROR_NOT_SUPPORTED``.

``FakeNvml.missing_functions`` simulates an older driver: a listed function raises
``NVMLError_FunctionNotFound``. ``FakeNvml.fail_next`` queues a one-off error.
``FakeNvml.before_next`` runs an action at the start of the next call(s) of a function,
outside the fake's lock: a GPU that falls off the bus in the middle of a scrape
(``lambda: setattr(gpu, "lost", True)``), or a call that hangs in the driver until the
test lets it go (``release.wait``).
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pynvml

__all__ = ["FakeGpu", "FakeNvLink", "FakeNvml", "fake_h200_node"]

# H200 SXM (HGX H200, 141 GB HBM3e) as nvidia-smi -q shows it.
H200_NAME = "NVIDIA H200"
H200_MEMORY_TOTAL_BYTES = 143_771 * 1024 * 1024  # 150_754_820_096 bytes, 141 GB HBM3e
H200_MEMORY_RESERVED_BYTES = 541 * 1024 * 1024
H200_PCI_DEVICE_ID = 0x233510DE  # device 0x2335, vendor 0x10de
H200_PCI_SUBSYSTEM_ID = 0x18BE10DE
H200_POWER_LIMIT_W = 700.0
H200_SM_CLOCK_MAX_MHZ = 1980
H200_MEM_CLOCK_MHZ = 3201
H200_NVLINKS = 18
# HGX baseboard PCI bus numbers, in NVML's "domain:bus:device.function" form.
HGX_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
DRIVER_VERSION = "570.133.20"

_NVLINK_COUNTER_FIELDS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
    pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: "ecc_data",
}

# Activity rates a FakeGpu integrates over time: field name -> scale to a 0-1 fraction.
_RATE_FIELDS = {
    "util_percent": 0.01,
    "tensor_active": 1.0,
    "hmma_active": 1.0,
    "imma_active": 1.0,
    "dfma_active": 1.0,
    "sm_active": 1.0,
    "sm_occupancy": 1.0,
}
_INTEGRATED = frozenset({*_RATE_FIELDS, "power_w"})

# GPM metric id -> the FakeGpu rate whose integral it reports.
_GPM_RATES = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "util_percent",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: "dfma_active",
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: "hmma_active",
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: "imma_active",
}

_SUPPORTED_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
)
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of a non-MIG event


def _error(code: int) -> pynvml.NVMLError:
    """pynvml's own exception for an NVML return code (e.g. NVMLError_GpuIsLost)."""
    return pynvml.NVMLError(code)


@dataclass
class FakeNvLink:
    """One NVLink: its state and its data-link-layer error counters."""

    active: bool = True
    replay: int = 0
    recovery: int = 0
    crc_flit: int = 0
    crc_data: int = 0
    ecc_data: int = 0


@dataclass(eq=False)
class FakeGpu:
    """The state of one simulated GPU. Set fields at any time, from any thread.

    Units are the ones a person reads (degrees Celsius, watts, MHz, bytes, percent
    for ``util_percent``/``mem_util_percent``, 0-1 fractions of time for the per-pipe
    activity rates); the fake converts to NVML's units (mW, mJ, percent) when asked.
    Assigning one field is atomic; ``update(**fields)`` changes several at once.
    """

    index: int = 0
    name: str = H200_NAME
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:18:00.0"
    pci_device_id: int = H200_PCI_DEVICE_ID
    pci_subsystem_id: int = H200_PCI_SUBSYSTEM_ID
    # Temperatures (degrees C). memory_temperature_c None = no HBM sensor (NotSupported).
    temperature_c: int = 34
    memory_temperature_c: int | None = 38
    shutdown_temp_c: int = 92
    slowdown_temp_c: int = 89
    gpu_max_temp_c: int = 87
    memory_max_temp_c: int = 95
    # Power (W) and energy (mJ counted before this object existed).
    power_w: float = 75.0
    power_limit_w: float = H200_POWER_LIMIT_W
    energy_start_mj: int = 0
    # Clocks (MHz), busy time (percent), memory (bytes).
    sm_clock_mhz: int = H200_SM_CLOCK_MAX_MHZ
    mem_clock_mhz: int = H200_MEM_CLOCK_MHZ
    util_percent: float = 0.0
    mem_util_percent: float = 0.0
    memory_used_bytes: int = 0
    memory_total_bytes: int = H200_MEMORY_TOTAL_BYTES
    memory_reserved_bytes: int = H200_MEMORY_RESERVED_BYTES
    clock_event_reasons: int = 0  # nvmlClocksEventReason* bitmask
    # ECC counters and row remapping (correctable, uncorrectable, pending, failure).
    ecc_corrected_volatile: int = 0
    ecc_uncorrected_volatile: int = 0
    ecc_corrected_aggregate: int = 0
    ecc_uncorrected_aggregate: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    # Per-pipe activity, fractions of time 0-1 (GPM reports their time averages).
    tensor_active: float = 0.0
    hmma_active: float = 0.0
    imma_active: float = 0.0
    dfma_active: float = 0.0
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    nvlinks: list[FakeNvLink] = field(
        default_factory=lambda: [FakeNvLink() for _ in range(H200_NVLINKS)]
    )
    # Failure modes and capabilities.
    lost: bool = False
    reset_required: bool = False
    unsupported: set[Any] = field(default_factory=set)
    gpm_supported: bool = True
    clock: Callable[[], float] = time.monotonic
    # the driver's utilization sample period, in seconds of ``clock``
    utilization_period_s: float = 1.0 / 6.0

    if TYPE_CHECKING:  # per-instance state set in __post_init__, not dataclass fields
        _lock: ClassVar[threading.RLock]
        _integrals: ClassVar[dict[str, float]]
        _t_last: ClassVar[float]
        _busy_log: ClassVar[deque[tuple[float, float, float]]]

    def __post_init__(self) -> None:
        for name in _RATE_FIELDS:
            self._validate(name, getattr(self, name))
        d = self.__dict__
        d["_integrals"] = dict.fromkeys([*_RATE_FIELDS, "power_w"], 0.0)
        d["_t_last"] = self.clock()
        d["_lock"] = threading.RLock()
        # (since, util %, memory util %): the rates in force, for the utilization window
        d["_busy_log"] = deque(
            [(d["_t_last"], float(self.util_percent), float(self.mem_util_percent))]
        )

    # -- thread-safe mutation ---------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        lock = self.__dict__.get("_lock")
        if lock is None:  # still in __init__
            object.__setattr__(self, name, value)
            return
        self._validate(name, value)
        with lock:
            if name in _INTEGRATED or name == "clock":
                self._advance_locked()
            object.__setattr__(self, name, value)
            if name == "clock":
                self.__dict__["_t_last"] = value()
                self._busy_log.clear()
                self._log_busy_locked()
            elif name in ("util_percent", "mem_util_percent"):
                self._log_busy_locked()

    def update(self, **fields: Any) -> None:
        """Set several fields atomically (a reader sees all of them or none)."""
        for name in fields:
            if name.startswith("_") or name not in self.__dataclass_fields__:
                raise AttributeError(f"FakeGpu has no field {name!r}")
        with self._lock:
            for name, value in fields.items():
                setattr(self, name, value)

    def add_ecc_errors(self, corrected: int = 0, uncorrected: int = 0) -> None:
        """Count new ECC errors in both the volatile and the aggregate counters."""
        with self._lock:
            self.update(
                ecc_corrected_volatile=self.ecc_corrected_volatile + corrected,
                ecc_corrected_aggregate=self.ecc_corrected_aggregate + corrected,
                ecc_uncorrected_volatile=self.ecc_uncorrected_volatile + uncorrected,
                ecc_uncorrected_aggregate=self.ecc_uncorrected_aggregate + uncorrected,
            )

    @staticmethod
    def _validate(name: str, value: Any) -> None:
        if name in _RATE_FIELDS:
            top = 100.0 if name == "util_percent" else 1.0
            if not 0.0 <= float(value) <= top:
                raise ValueError(f"FakeGpu.{name} must be within 0..{top:g}, got {value!r}")

    def _advance_locked(self) -> None:
        now = self.clock()
        dt = now - self._t_last
        if dt > 0:
            integrals = self._integrals
            for name, scale in _RATE_FIELDS.items():
                integrals[name] += float(getattr(self, name)) * scale * dt
            integrals["power_w"] += float(self.power_w) * dt
            self.__dict__["_t_last"] = now

    def _log_busy_locked(self) -> None:
        now = self.clock()
        log = self._busy_log
        if log and log[-1][0] >= now:
            log.pop()  # changed again at the same instant: only the last value was in force
        log.append((now, float(self.util_percent), float(self.mem_util_percent)))
        horizon = now - self.utilization_period_s
        while len(log) > 1 and log[1][0] <= horizon:
            log.popleft()

    def _utilization(self) -> tuple[float, float]:
        """(busy %, memory %) averaged over the last ``utilization_period_s``; over what
        there is of it for a GPU younger than that."""
        with self._lock:
            now = self.clock()
            start = now - self.utilization_period_s
            log = list(self._busy_log)
        start = max(start, log[0][0])
        span = now - start
        if span <= 0:
            return log[-1][1], log[-1][2]
        busy = memory = 0.0
        for k, (since, util, mem) in enumerate(log):
            until = log[k + 1][0] if k + 1 < len(log) else now
            overlap = min(until, now) - max(since, start)
            if overlap > 0:
                busy += util * overlap
                memory += mem * overlap
        return busy / span, memory / span

    def _snapshot(self) -> tuple[float, dict[str, float]]:
        """(clock time, cumulative integrals) for a GPM sample."""
        with self._lock:
            self._advance_locked()
            return self._t_last, dict(self._integrals)

    def _energy_mj(self) -> int:
        with self._lock:
            self._advance_locked()
            return int(self.energy_start_mj + self._integrals["power_w"] * 1000.0)

    def _check(self, name: str, args: tuple[Any, ...]) -> None:
        """Raise what NVML raises for this call on this GPU's current state."""
        with self._lock:
            if self.lost:
                raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
            if self.reset_required:
                raise _error(pynvml.NVML_ERROR_RESET_REQUIRED)
            if name in self.unsupported:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if args and all(isinstance(a, int) for a in args) and (name, *args) in self.unsupported:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)


@dataclass
class _Sample:
    buffer: Any
    gpu_index: int | None = None
    taken_at: float = 0.0
    integrals: dict[str, float] | None = None


@dataclass
class _EventSet:
    buffer: Any
    registrations: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    queue: deque[tuple[int, int, int]] = field(default_factory=deque)
    freed: bool = False


@dataclass
class _Failure:
    function: str
    code: int
    times: int
    gpu_index: int | None


@dataclass
class _Action:
    function: str
    action: Callable[[], Any]
    times: int
    gpu_index: int | None


def _api(*, device: bool = False, needs_init: bool = True) -> Callable[..., Any]:
    """Common NVML behaviour around one fake function.

    Counts the call, raises FunctionNotFound for ``missing_functions``, Uninitialized
    before nvmlInit, a queued ``fail_next`` error, and for device functions
    InvalidArgument for a bad handle and GpuIsLost/ResetRequired/NotSupported from the
    GPU's state. For device functions the wrapper hands the implementation the
    FakeGpu in place of the handle (the parameter keeps pynvml's name).
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = fn.__name__

        @functools.wraps(fn)
        def wrapper(self: FakeNvml, *args: Any, **kwargs: Any) -> Any:
            gpu = self._enter(name, args, device=device, needs_init=needs_init)
            if device:
                return fn(self, gpu, *args[1:], **kwargs)
            return fn(self, *args, **kwargs)

        wrapper._fake_nvml_api = True  # type: ignore[attr-defined]
        return wrapper

    return deco


class FakeNvml:
    """pynvml's API answered by FakeGpus. Starts uninitialized: call ``nvmlInit()``."""

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        driver_version: str = DRIVER_VERSION,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.missing_functions: set[str] = set()
        self.calls: Counter[str] = Counter()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._init_count = 0
        self._handles: dict[int, Any] = {}  # gpu index -> buffer the handle points at
        self._handle_index: dict[int, int] = {}  # handle address -> gpu index
        self._samples: dict[int, _Sample] = {}
        # gpu index -> start of the window the last nvmlGpmMetricsGet on it covered
        self._gpm_reported: dict[int, float] = {}
        self._event_sets: dict[int, _EventSet] = {}
        self._failures: list[_Failure] = []
        self._actions: list[_Action] = []
        if clock is not None:
            for gpu in self.gpus:
                gpu.clock = clock

    # -- helpers for tests and simulators -----------------------------------------

    @property
    def initialized(self) -> bool:
        with self._lock:
            return self._init_count > 0

    @property
    def live_gpm_samples(self) -> int:
        """GPM samples allocated and not yet freed (a leak check)."""
        with self._lock:
            return len(self._samples)

    @property
    def live_event_sets(self) -> int:
        """Event sets created and not yet freed (a leak check)."""
        with self._lock:
            return len(self._event_sets)

    def gpm_reported_since(self, gpu_index: int) -> float | None:
        """The earliest time (the GPU's clock) a GPM reading from the samples taken so
        far can cover: the start of the window the last ``nvmlGpmMetricsGet`` on this
        GPU computed, or the oldest of its samples still allocated (a later pair starts
        there). None before its first sample."""
        with self._lock:
            times = [
                s.taken_at
                for s in self._samples.values()
                if s.gpu_index == gpu_index and s.integrals is not None
            ]
            if gpu_index in self._gpm_reported:
                times.append(self._gpm_reported[gpu_index])
        return min(times) if times else None

    def inject_xid(self, gpu_index: int, xid: int) -> int:
        """Raise XID ``xid`` on a GPU, as the driver does (e.g. 79: fell off the bus).

        The event reaches every event set that registered this GPU for
        ``nvmlEventTypeXidCriticalError``; like NVML, nobody listening means it is lost.
        Returns how many event sets received it.
        """
        if not 0 <= gpu_index < len(self.gpus):
            raise IndexError(f"no fake GPU {gpu_index}")
        delivered = 0
        with self._cond:
            for es in self._event_sets.values():
                mask = es.registrations.get(gpu_index, 0)
                if mask & pynvml.nvmlEventTypeXidCriticalError:
                    es.queue.append((gpu_index, pynvml.nvmlEventTypeXidCriticalError, xid))
                    delivered += 1
            self._cond.notify_all()
        return delivered

    def fail_next(
        self, function: str, code: int, *, times: int = 1, gpu_index: int | None = None
    ) -> None:
        """Make the next ``times`` calls of ``function`` (on ``gpu_index``, or on any
        GPU) raise ``pynvml.NVMLError(code)``, e.g. NVML_ERROR_UNKNOWN."""
        with self._lock:
            self._failures.append(_Failure(function, code, times, gpu_index))

    def before_next(
        self,
        function: str,
        action: Callable[[], Any],
        *,
        times: int = 1,
        gpu_index: int | None = None,
    ) -> None:
        """Run ``action()`` at the start of the next ``times`` calls of ``function`` (on
        ``gpu_index``, or on any GPU), before the call looks at the GPU's state. It runs
        outside the fake's lock, so an action that blocks hangs only its own call, as a
        call stuck in the driver does; calls on other GPUs go on."""
        with self._lock:
            self._actions.append(_Action(function, action, times, gpu_index))

    def handle(self, gpu_index: int) -> Any:
        """The ``c_nvmlDevice_t`` of a GPU, without NVML's checks (for tests)."""
        with self._lock:
            buf = self._handles.get(gpu_index)
            if buf is None:
                buf = ctypes.create_string_buffer(8)
                self._handles[gpu_index] = buf
                self._handle_index[ctypes.addressof(buf)] = gpu_index
            return ctypes.cast(buf, pynvml.c_nvmlDevice_t)

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(pynvml, name)
        except AttributeError:
            raise AttributeError(f"neither FakeNvml nor pynvml has {name!r}") from None
        if inspect.isfunction(value):
            raise AttributeError(
                f"FakeNvml does not implement pynvml.{name}; implement it in "
                "krea_ops/exporters/fakenvml.py before the collector may call it"
            )
        return value

    # -- plumbing -------------------------------------------------------------------

    def _enter(
        self, name: str, args: tuple[Any, ...], *, device: bool, needs_init: bool
    ) -> FakeGpu | None:
        with self._lock:
            self.calls[name] += 1
            if name in self.missing_functions:
                raise _error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if needs_init and self._init_count == 0:
                raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
            gpu_index = self._index_of(args[0]) if device and args else None
            if device and gpu_index is None:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            actions = []
            for pending in list(self._actions) if self._actions else ():
                if pending.function == name and pending.gpu_index in (None, gpu_index):
                    pending.times -= 1
                    if pending.times <= 0:
                        self._actions.remove(pending)
                    actions.append(pending.action)
        for action in actions:
            action()
        with self._lock:
            for failure in self._failures:
                if failure.function == name and failure.gpu_index in (None, gpu_index):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    raise _error(failure.code)
            gpu = self.gpus[gpu_index] if gpu_index is not None else None
        if gpu is not None:
            gpu._check(name, args[1:])
        return gpu

    def _index_of(self, handle: Any) -> int | None:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            return None
        index = self._handle_index.get(address or 0)
        if index is None or index >= len(self.gpus):
            return None
        return index

    def _sample(self, sample: Any) -> _Sample:
        try:
            address = ctypes.cast(sample, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            address = None
        slot = self._samples.get(address or 0)
        if slot is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return slot

    def _event_set(self, event_set: Any) -> _EventSet:
        try:
            address = ctypes.cast(event_set, ctypes.c_void_p).value
        except (ctypes.ArgumentError, TypeError):
            address = None
        es = self._event_sets.get(address or 0)
        if es is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    # -- library ----------------------------------------------------------------------

    @_api(needs_init=False)
    def nvmlInit(self) -> None:
        with self._lock:
            self._init_count += 1

    @_api(needs_init=False)
    def nvmlShutdown(self) -> None:
        with self._lock:
            if self._init_count == 0:
                raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
            self._init_count -= 1

    @_api()
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    @_api()
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    @_api()
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.handle(index)

    # -- identity -----------------------------------------------------------------------

    @_api(device=True)
    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    @_api(device=True)
    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    @_api(device=True)
    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> pynvml.nvmlPciInfo_t:
        domain, bus, rest = handle.pci_bus_id.split(":")
        dev = rest.split(".")[0]
        info = pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.busId = handle.pci_bus_id.encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(dev, 16)
        info.pciDeviceId = handle.pci_device_id
        info.pciSubSystemId = handle.pci_subsystem_id
        return info

    # -- thermals ---------------------------------------------------------------------

    @_api(device=True)
    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            if 0 <= sensor < pynvml.NVML_TEMPERATURE_COUNT:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(handle.temperature_c)

    @_api(device=True)
    def nvmlDeviceGetTemperatureV(
        self, handle: FakeGpu, sensor: int, version: int = pynvml.nvmlTemperature_v1
    ) -> int:
        if version != pynvml.nvmlTemperature_v1:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            if 0 <= sensor < pynvml.NVML_TEMPERATURE_COUNT:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(handle.temperature_c)

    @_api(device=True)
    def nvmlDeviceGetTemperatureThreshold(self, handle: FakeGpu, threshold: int) -> int:
        values = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: handle.shutdown_temp_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: handle.slowdown_temp_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: handle.memory_max_temp_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: handle.gpu_max_temp_c,
        }
        if threshold in values:
            return int(values[threshold])
        if 0 <= threshold < pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @_api(device=True)
    def nvmlDeviceGetMarginTemperature(self, handle: FakeGpu) -> int:
        with handle._lock:
            return int(handle.slowdown_temp_c - handle.temperature_c)

    @_api(device=True)
    def nvmlDeviceGetFieldValues(self, handle: FakeGpu, fieldIds: list[Any]) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        now_us = int(time.time() * 1_000_000)
        with handle._lock:
            for i, requested in enumerate(fieldIds):
                try:
                    field_id, scope_id = requested
                except TypeError:
                    field_id, scope_id = requested, 0
                slot = values[i]
                slot.fieldId = field_id
                slot.scopeId = scope_id
                slot.timestamp = now_us
                slot.latencyUsec = 0
                self._fill_field(handle, slot, field_id)
        return values

    def _fill_field(self, gpu: FakeGpu, slot: Any, field_id: int) -> None:
        ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        uint = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        value: tuple[int, int] | None
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            t = gpu.memory_temperature_c
            value = None if t is None else (uint, int(t))
        elif field_id == pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
            value = (ull, gpu.ecc_corrected_volatile)
        elif field_id == pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
            value = (ull, gpu.ecc_uncorrected_volatile)
        elif field_id == pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
            value = (ull, gpu.ecc_corrected_aggregate)
        elif field_id == pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
            value = (ull, gpu.ecc_uncorrected_aggregate)
        elif field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            value = (uint, len(gpu.nvlinks))
        elif field_id in (
            pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
            pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
            pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        ):
            # Hopper answers the legacy all-links totals with success and zero
            # (DataDog/datadog-agent#55966); the per-link counters hold the counts.
            value = (ull, 0)
        elif field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            value = (ull, gpu._energy_mj())
        else:
            value = None
        if ("nvmlDeviceGetFieldValues", field_id) in gpu.unsupported:
            value = None
        if value is None:
            slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            return
        slot.nvmlReturn = pynvml.NVML_SUCCESS
        slot.valueType = value[0]
        if value[0] == ull:
            slot.value.ullVal = value[1]
        else:
            slot.value.uiVal = value[1]

    # -- power, clocks, utilization, memory ------------------------------------------------

    @_api(device=True)
    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return round(handle.power_w * 1000)

    @_api(device=True)
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        return round(handle.power_limit_w * 1000)

    @_api(device=True)
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        return handle._energy_mj()

    @_api(device=True)
    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, type: int) -> int:
        if type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return int(handle.sm_clock_mhz)
        if type == pynvml.NVML_CLOCK_MEM:
            return int(handle.mem_clock_mhz)
        if type == pynvml.NVML_CLOCK_VIDEO:
            return 1755
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @_api(device=True)
    def nvmlDeviceGetMaxClockInfo(self, handle: FakeGpu, type: int) -> int:
        if type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return H200_SM_CLOCK_MAX_MHZ
        if type == pynvml.NVML_CLOCK_MEM:
            return H200_MEM_CLOCK_MHZ
        if type == pynvml.NVML_CLOCK_VIDEO:
            return 1755
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @_api(device=True)
    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> pynvml.c_nvmlUtilization_t:
        util = pynvml.c_nvmlUtilization_t()
        busy, memory = handle._utilization()
        util.gpu = round(busy)
        util.memory = round(memory)
        return util

    @_api(device=True)
    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None) -> Any:
        with handle._lock:
            total, used = handle.memory_total_bytes, handle.memory_used_bytes
            reserved = handle.memory_reserved_bytes
        if not version:
            mem = pynvml.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, used, max(total - used, 0)
            return mem
        if version != pynvml.nvmlMemory_v2:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem2 = pynvml.c_nvmlMemory_v2_t()
        mem2.version = version
        mem2.total, mem2.reserved = total, reserved
        mem2.used = max(used - reserved, 0)
        mem2.free = max(total - used, 0)
        return mem2

    @_api(device=True)
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return int(handle.clock_event_reasons)

    @_api(device=True)
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu) -> int:
        return int(handle.clock_event_reasons)

    # -- ECC and row remapping -----------------------------------------------------------

    @_api(device=True)
    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, errorType: int, counterType: int) -> int:
        key = (errorType, counterType)
        with handle._lock:
            counts = {
                (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): (
                    handle.ecc_corrected_volatile
                ),
                (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): (
                    handle.ecc_uncorrected_volatile
                ),
                (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): (
                    handle.ecc_corrected_aggregate
                ),
                (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): (
                    handle.ecc_uncorrected_aggregate
                ),
            }
        if key not in counts:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(counts[key])

    @_api(device=True)
    def nvmlDeviceGetRemappedRows(self, device: FakeGpu) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = device.remapped_rows
        return (int(corr), int(unc), int(pending), int(failure))

    # -- NVLink ------------------------------------------------------------------------------

    def _link(self, gpu: FakeGpu, link: int) -> FakeNvLink:
        links = gpu.nvlinks
        if not 0 <= link < min(len(links), pynvml.NVML_NVLINK_MAX_LINKS):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    @_api(device=True)
    def nvmlDeviceGetNvLinkState(self, device: FakeGpu, link: int) -> int:
        active = self._link(device, link).active
        return int(pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED)

    @_api(device=True)
    def nvmlDeviceGetNvLinkErrorCounter(self, device: FakeGpu, link: int, counter: int) -> int:
        nvlink = self._link(device, link)
        name = _NVLINK_COUNTER_FIELDS.get(counter)
        if name is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(getattr(nvlink, name))

    # -- GPM -----------------------------------------------------------------------------------

    @_api(device=True)
    def nvmlGpmQueryDeviceSupport(self, device: FakeGpu) -> pynvml.c_nvmlGpmSupport_t:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if device.gpm_supported else 0
        return support

    @_api()
    def nvmlGpmSampleAlloc(self) -> Any:
        buf = ctypes.create_string_buffer(16)
        with self._lock:
            self._samples[ctypes.addressof(buf)] = _Sample(buffer=buf)
        return ctypes.cast(buf, pynvml.c_nvmlGpmSample_t)

    @_api()
    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        with self._lock:
            self._sample(gpmSample)
            address = ctypes.cast(gpmSample, ctypes.c_void_p).value
            del self._samples[address or 0]

    @_api(device=True)
    def nvmlGpmSampleGet(self, device: FakeGpu, gpmSample: Any) -> Any:
        if not device.gpm_supported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        taken_at, integrals = device._snapshot()
        with self._lock:
            slot = self._sample(gpmSample)
            slot.gpu_index = self.gpus.index(device)
            slot.taken_at = taken_at
            slot.integrals = integrals
        return gpmSample

    @_api()
    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if metricsGet.numMetrics > pynvml.NVML_GPM_METRIC_MAX:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            s1 = self._sample(metricsGet.sample1)
            s2 = self._sample(metricsGet.sample2)
            if s1.integrals is None or s2.integrals is None or s1.gpu_index != s2.gpu_index:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            assert s1.gpu_index is not None
            gpu = self.gpus[s1.gpu_index]
            i1, i2 = s1.integrals, s2.integrals
            dt = s2.taken_at - s1.taken_at
            if dt >= 0:
                self._gpm_reported[s1.gpu_index] = min(s1.taken_at, s2.taken_at)
        if dt < 0:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            rate = _GPM_RATES.get(metric.metricId)
            if rate is None or ("nvmlGpmMetricsGet", metric.metricId) in gpu.unsupported:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                metric.value = 0.0
                continue
            percent = 100.0 * (i2[rate] - i1[rate]) / dt if dt > 0 else 0.0
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = min(max(percent, 0.0), 100.0)
        return metricsGet

    # -- events ----------------------------------------------------------------------------------

    @_api()
    def nvmlEventSetCreate(self) -> Any:
        buf = ctypes.create_string_buffer(8)
        with self._lock:
            self._event_sets[ctypes.addressof(buf)] = _EventSet(buffer=buf)
        return ctypes.cast(buf, pynvml.c_nvmlEventSet_t)

    @_api(device=True)
    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, eventTypes: int, eventSet: Any) -> None:
        if eventTypes & ~_SUPPORTED_EVENTS:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            es = self._event_set(eventSet)
            index = self.gpus.index(handle)
            es.registrations[index] = es.registrations.get(index, 0) | eventTypes

    @_api()
    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> pynvml.c_nvmlEventData_t:
        deadline = time.monotonic() + max(timeoutms, 0) / 1000.0
        with self._cond:
            es = self._event_set(eventSet)
            while not es.queue and not es.freed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if es.freed:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if not es.queue:
                raise _error(pynvml.NVML_ERROR_TIMEOUT)
            gpu_index, event_type, event_data = es.queue.popleft()
        data = pynvml.c_nvmlEventData_t()
        data.device = self.handle(gpu_index)
        data.eventType = event_type
        data.eventData = event_data
        data.gpuInstanceId = _NO_INSTANCE
        data.computeInstanceId = _NO_INSTANCE
        return data

    @_api()
    def nvmlEventSetFree(self, eventSet: Any) -> None:
        with self._cond:
            es = self._event_set(eventSet)
            es.freed = True
            address = ctypes.cast(eventSet, ctypes.c_void_p).value
            del self._event_sets[address or 0]
            self._cond.notify_all()


def implemented_functions() -> list[str]:
    """Names of the pynvml functions FakeNvml implements."""
    return sorted(
        name
        for name, value in vars(FakeNvml).items()
        if callable(value) and getattr(value, "_fake_nvml_api", False)
    )


def _fake_uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _bus_id(i: int) -> str:
    bus = HGX_BUS_IDS[i] if i < len(HGX_BUS_IDS) else f"{0x100 + i:X}"[-2:]
    return f"00000000:{bus}:00.0"


def fake_h200_node(
    count: int = 8, seed: int = 0, *, clock: Callable[[], float] | None = None
) -> FakeNvml:
    """An HGX H200 node in the middle of a healthy training run (deterministic per seed).

    Every GPU: "NVIDIA H200", 141 GB HBM3e, 700 W limit, 18 active NVLinks, GPM
    supported, 100 % busy with ~35-55 % tensor-pipe activity, no errors.
    The returned FakeNvml is not initialized yet: call ``nvmlInit()``.
    """
    rng = random.Random(seed)
    gib = 1024**3
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    gpus = []
    for i in range(count):
        temp = rng.randint(52, 66)
        tensor = round(rng.uniform(0.35, 0.55), 3)
        gpus.append(
            FakeGpu(
                index=i,
                uuid=_fake_uuid(rng),
                pci_bus_id=_bus_id(i),
                temperature_c=temp,
                memory_temperature_c=temp + rng.randint(3, 8),
                power_w=round(rng.uniform(520.0, 660.0), 3),
                energy_start_mj=rng.randint(10**9, 5 * 10**10),
                sm_clock_mhz=rng.choice([1980, 1980, 1965, 1950]),
                util_percent=100.0,
                mem_util_percent=float(rng.randint(35, 60)),
                memory_used_bytes=rng.randint(110 * gib, 134 * gib),
                tensor_active=tensor,
                hmma_active=round(tensor * 0.97, 3),
                sm_active=round(rng.uniform(0.85, 0.97), 3),
                sm_occupancy=round(rng.uniform(0.30, 0.50), 3),
                **extra,
            )
        )
    return FakeNvml(gpus, clock=clock)
