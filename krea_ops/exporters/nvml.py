"""GPU and NVLink collector over NVML (``pynvml`` from nvidia-ml-py).

``GpuCollector`` is a prometheus_client custom collector. It talks to an object
``nvml`` that has pynvml's function names and signatures: in production the
``pynvml`` module itself (see ``load_nvml``), in tests and in the simulator
``krea_ops.exporters.fakenvml.FakeNvml``. Constants, ctypes structures and exception
classes are pynvml's own (the fake returns and raises the same ones).

The narrow interface -- every pynvml function the collector calls, and therefore
every function FakeNvml must implement -- is ``NVML_FUNCTIONS``:

  nvmlShutdown, nvmlSystemGetDriverVersion, nvmlDeviceGetCount,
  nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID, nvmlDeviceGetName,
  nvmlDeviceGetPciInfo, nvmlDeviceGetTemperatureV, nvmlDeviceGetTemperature,
  nvmlDeviceGetTemperatureThreshold, nvmlDeviceGetMarginTemperature,
  nvmlDeviceGetFieldValues, nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit,
  nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetClockInfo,
  nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
  nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetCurrentClocksThrottleReasons,
  nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRemappedRows, nvmlDeviceGetNvLinkState,
  nvmlDeviceGetNvLinkErrorCounter, nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc,
  nvmlGpmSampleGet, nvmlGpmMetricsGet, nvmlGpmSampleFree, nvmlEventSetCreate,
  nvmlDeviceRegisterEvents, nvmlEventSetWait, nvmlEventSetFree

(``load_nvml`` also calls ``pynvml.nvmlInit``.) ``nvmlDeviceGetTemperature`` and
``nvmlDeviceGetCurrentClocksThrottleReasons`` are the deprecated spellings, used only
when the driver lacks the new function (``NVMLError_FunctionNotFound``).

How it reads, in short (docs/metrics.md has the metric table):

* Identity (index, UUID, PCI bus id, model) is read once per GPU and cached, so a GPU
  that falls off the bus later keeps its labels.
* A GPU answering ``NVMLError_GpuIsLost`` or ``NVMLError_ResetRequired`` gets
  ``krea_gpu_up 0`` plus ``krea_gpu_down_info{reason}``; its readings are absent; the
  other GPUs are complete. An unexpected (non-NVML) exception does the same with
  reason ``unexpected``. ``collect()`` never raises.
* NVML calls can hang in the driver (a GPU falling off the bus, a wedged driver), and a
  thread stuck in a C call cannot be interrupted. So the GPUs are read on a reader
  thread, GPU after GPU, and the scrape waits at most ``scrape_timeout_s`` in all. A GPU
  whose current NVML call has run ``call_timeout_s`` is given up on, and a new reader
  takes the GPUs after it. A GPU the deadline left no time for is unknown in that scrape
  (no series: slowness is no evidence against the GPU) and is read in the next.
  A GPU whose call hung reads ``krea_gpu_up 0`` with ``krea_gpu_down_info{reason="timeout"}``
  (and one ``krea_gpu_nvml_errors_total{kind="timeout"}``) for every scrape until its
  call returns; no new read of it starts meanwhile, so a hung GPU holds exactly one
  thread, shown in ``krea_gpu_nvml_calls_hung``. Concurrent scrapes share a GPU's read
  in progress rather than starting another. (A thread per GPU would cost about twice the
  CPU of the reads' own overhead and more wall time from GIL hand-offs, for nothing
  while no call hangs.)
* Per-GPU NVLink sums (``krea_gpu_nvlink_errors_total``) are kept by the collector from
  the links' increases, a link whose counter went down (reset) adding its new value, as
  Prometheus' rate() reads a reset; so a sum never goes down while the exporter runs.
  The per-link counters and every other counter are the hardware's values as read:
  Prometheus treats a decrease as a reset, so rate() and increase() are never negative.
* A call answering NotSupported (or FunctionNotFound) leaves its series absent (never
  0), is counted once in ``krea_gpu_nvml_errors_total`` and is not asked again for
  that GPU (support does not change while the driver is loaded). Any other NVML error
  leaves that series absent for that scrape and is counted every time.
* NVLink links are discovered once per GPU (links 0..NVML_NVLINK_MAX_LINKS-1 that
  answer nvmlDeviceGetNvLinkState); the probe's NotSupported/InvalidArgument answers
  for absent links are expected and not counted.
* GPM (Hopper+) runs in a background thread: a new sample per GPU every
  ``gpm_interval_s``, metrics computed against the previous sample, old sample freed.
  ``collect()`` only reads the cached result; values older than
  ``max(5 * gpm_interval_s, 5 s)`` are not exported (the timestamp series still is).
  A scrape that finds the GPM thread stuck in one GPU's call for ``call_timeout_s``
  starts another that leaves that GPU out until the call returns.
* XID: a background thread waits on an NVML event set (XID critical errors) with a
  timeout so it can stop. Counts per XID code are kept since the collector started;
  the last XID is exported only within ``xid_window_s`` of when it happened.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pynvml
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from krea_ops.errors import KreaError

__all__ = ["NVML_FUNCTIONS", "GpuCollector", "NvmlUnavailable", "load_nvml"]

NVML_FUNCTIONS: tuple[str, ...] = (
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetMarginTemperature",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlGpmSampleFree",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
)


def _const(name: str, default: int) -> int:
    """A pynvml constant, with NVML's ABI value for older nvidia-ml-py releases."""
    return int(getattr(pynvml, name, default))


NVML_SUCCESS = _const("NVML_SUCCESS", 0)
NVML_TEMPERATURE_GPU = _const("NVML_TEMPERATURE_GPU", 0)
THRESHOLD_SHUTDOWN = _const("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0)
THRESHOLD_SLOWDOWN = _const("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)
THRESHOLD_MEM_MAX = _const("NVML_TEMPERATURE_THRESHOLD_MEM_MAX", 2)
THRESHOLD_GPU_MAX = _const("NVML_TEMPERATURE_THRESHOLD_GPU_MAX", 3)
FI_DEV_MEMORY_TEMP = _const("NVML_FI_DEV_MEMORY_TEMP", 82)
CLOCK_SM = _const("NVML_CLOCK_SM", 1)
CLOCK_MEM = _const("NVML_CLOCK_MEM", 2)
FEATURE_ENABLED = _const("NVML_FEATURE_ENABLED", 1)
NVLINK_MAX_LINKS = _const("NVML_NVLINK_MAX_LINKS", 36)
EVENT_XID = _const("nvmlEventTypeXidCriticalError", 0x8)
GPM_METRICS_GET_VERSION = _const("NVML_GPM_METRICS_GET_VERSION", 1)

# (label value, nvmlClocksEventReason* bit)
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", _const("nvmlClocksEventReasonGpuIdle", 0x1)),
    ("applications_clocks_setting", _const("nvmlClocksEventReasonApplicationsClocksSetting", 0x2)),
    ("sw_power_cap", _const("nvmlClocksEventReasonSwPowerCap", 0x4)),
    ("hw_slowdown", _const("nvmlClocksEventReasonHwSlowdown", 0x8)),
    ("sync_boost", _const("nvmlClocksEventReasonSyncBoost", 0x10)),
    ("sw_thermal", _const("nvmlClocksEventReasonSwThermalSlowdown", 0x20)),
    ("hw_thermal", _const("nvmlClocksEventReasonHwThermalSlowdown", 0x40)),
    ("hw_power_brake", _const("nvmlClocksEventReasonHwPowerBrakeSlowdown", 0x80)),
    ("display_clock_setting", _const("nvmlClocksEventReasonDisplayClockSetting", 0x100)),
)

# (error_type label, counter_type label, nvmlMemoryErrorType_t, nvmlEccCounterType_t)
ECC_COUNTERS: tuple[tuple[str, str, int, int], ...] = tuple(
    (et, ct, _const(f"NVML_MEMORY_ERROR_TYPE_{et.upper()}", ev), _const(f"NVML_{cname}_ECC", cv))
    for et, ev in (("corrected", 0), ("uncorrected", 1))
    for ct, cname, cv in (("volatile", "VOLATILE", 0), ("aggregate", "AGGREGATE", 1))
)

# (counter label, nvmlNvLinkErrorCounter_t)
NVLINK_COUNTERS: tuple[tuple[str, int], ...] = (
    ("replay", _const("NVML_NVLINK_ERROR_DL_REPLAY", 0)),
    ("recovery", _const("NVML_NVLINK_ERROR_DL_RECOVERY", 1)),
    ("crc_flit", _const("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2)),
    ("crc_data", _const("NVML_NVLINK_ERROR_DL_CRC_DATA", 3)),
)

# (GPM metric id, metric name); GPM answers percent 0-100, exported as 0-1.
GPM_METRICS: tuple[tuple[int, str], ...] = (
    (_const("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5), "krea_gpu_tensor_active_ratio"),
    (_const("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 7), "krea_gpu_tensor_hmma_active_ratio"),
    (_const("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", 9), "krea_gpu_tensor_imma_active_ratio"),
    (_const("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", 6), "krea_gpu_tensor_dfma_active_ratio"),
    (_const("NVML_GPM_METRIC_SM_UTIL", 2), "krea_gpu_sm_active_ratio"),
    (_const("NVML_GPM_METRIC_SM_OCCUPANCY", 3), "krea_gpu_sm_occupancy_ratio"),
)

IDENTITY_LABELS = ("node", "gpu", "uuid", "pci_bus_id", "model")

GAUGE, COUNTER = "gauge", "counter"

# name -> (type, help, labels after the identity labels)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "krea_gpu_up": (
        GAUGE,
        "1 if the GPU answered NVML this scrape, 0 if it is lost, needs a reset, "
        "or could not be read (see krea_gpu_down_info).",
        (),
    ),
    "krea_gpu_down_info": (
        GAUGE,
        "Why krea_gpu_up is 0 (reason = NVML error kind, e.g. gpu_is_lost); value is 1.",
        ("reason",),
    ),
    "krea_gpu_temperature_celsius": (GAUGE, "GPU core temperature.", ()),
    "krea_gpu_memory_temperature_celsius": (
        GAUGE,
        "HBM temperature (field NVML_FI_DEV_MEMORY_TEMP); absent where not supported.",
        (),
    ),
    "krea_gpu_slowdown_temperature_celsius": (
        GAUGE,
        "Temperature at which the GPU slows its clocks (NVML slowdown threshold).",
        (),
    ),
    "krea_gpu_shutdown_temperature_celsius": (
        GAUGE,
        "Temperature at which the GPU shuts down (NVML shutdown threshold).",
        (),
    ),
    "krea_gpu_max_operating_temperature_celsius": (
        GAUGE,
        "Maximum GPU operating temperature (NVML GPU_MAX threshold).",
        (),
    ),
    "krea_gpu_memory_max_operating_temperature_celsius": (
        GAUGE,
        "Maximum HBM operating temperature (NVML MEM_MAX threshold).",
        (),
    ),
    "krea_gpu_slowdown_margin_celsius": (
        GAUGE,
        "Degrees left before thermal slowdown: nvmlDeviceGetMarginTemperature where the "
        "driver has it, else slowdown threshold minus temperature.",
        (),
    ),
    "krea_gpu_power_watts": (GAUGE, "Power draw.", ()),
    "krea_gpu_power_limit_watts": (GAUGE, "Enforced power limit.", ()),
    "krea_gpu_energy_joules_total": (
        COUNTER,
        "Energy consumed since the driver was loaded.",
        (),
    ),
    "krea_gpu_sm_clock_hertz": (GAUGE, "Current SM clock.", ()),
    "krea_gpu_sm_clock_max_hertz": (
        GAUGE,
        "Maximum SM clock (nvmlDeviceGetMaxClockInfo): a busy GPU well below it, with a "
        "clock event reason, runs slow.",
        (),
    ),
    "krea_gpu_memory_clock_hertz": (GAUGE, "Current memory clock.", ()),
    "krea_gpu_utilization_ratio": (
        GAUGE,
        "Fraction of the last sample period in which a kernel was running (busy time, "
        "not efficiency: a GPU waiting on input can read 1.0; see tensor_active).",
        (),
    ),
    "krea_gpu_memory_utilization_ratio": (
        GAUGE,
        "Fraction of the last sample period in which device memory was read or written.",
        (),
    ),
    "krea_gpu_memory_used_bytes": (GAUGE, "Device memory in use (includes reserved).", ()),
    "krea_gpu_memory_total_bytes": (GAUGE, "Device memory installed.", ()),
    "krea_gpu_clock_event_active": (
        GAUGE,
        "1 if this reason is currently holding clocks down (clock event / throttle "
        "reason), else 0.",
        ("reason",),
    ),
    "krea_gpu_clock_event_reasons": (
        GAUGE,
        "The same clock event reasons as one bitmask (nvmlClocksEventReason* bits, as "
        "DCGM's DCGM_FI_DEV_CLOCKS_EVENT_REASONS): one series per GPU for fleet-wide reads.",
        (),
    ),
    "krea_gpu_ecc_errors_total": (
        COUNTER,
        "ECC errors in device memory (volatile: since driver load; aggregate: lifetime).",
        ("error_type", "counter_type"),
    ),
    "krea_gpu_remapped_rows_total": (
        COUNTER,
        "HBM rows remapped, by the kind of error that caused it.",
        ("kind",),
    ),
    "krea_gpu_row_remap_pending": (
        GAUGE,
        "1 if a row remap is pending (takes effect at the next GPU reset).",
        (),
    ),
    "krea_gpu_row_remap_failed": (GAUGE, "1 if a row remap has failed.", ()),
    "krea_gpu_tensor_active_ratio": (
        GAUGE,
        "Fraction of time the SMs did any tensor-core work (GPM ANY_TENSOR_UTIL / 100), "
        "averaged over krea_gpu_gpm_window_seconds.",
        (),
    ),
    "krea_gpu_tensor_hmma_active_ratio": (
        GAUGE,
        "Fraction of time the SMs did HMMA (FP16/BF16/TF32/FP8) tensor work (GPM).",
        (),
    ),
    "krea_gpu_tensor_imma_active_ratio": (
        GAUGE,
        "Fraction of time the SMs did IMMA (integer) tensor work (GPM).",
        (),
    ),
    "krea_gpu_tensor_dfma_active_ratio": (
        GAUGE,
        "Fraction of time the SMs did DFMA (FP64) tensor work (GPM).",
        (),
    ),
    "krea_gpu_sm_active_ratio": (GAUGE, "Fraction of SMs that were busy (GPM SM_UTIL).", ()),
    "krea_gpu_sm_occupancy_ratio": (
        GAUGE,
        "Resident warps as a fraction of the theoretical maximum (GPM SM_OCCUPANCY).",
        (),
    ),
    "krea_gpu_gpm_sample_timestamp_seconds": (
        GAUGE,
        "Unix time of the newer GPM sample behind the GPM ratios.",
        (),
    ),
    "krea_gpu_gpm_window_seconds": (
        GAUGE,
        "Length of the interval the GPM ratios are averaged over.",
        (),
    ),
    "krea_gpu_xid_monitored": (
        GAUGE,
        "1 if XID events of this GPU are being watched (absent XID counts mean none "
        "seen), 0 if not.",
        (),
    ),
    "krea_gpu_xid_errors_total": (
        COUNTER,
        "XID critical errors seen since the exporter started, by XID code.",
        ("xid",),
    ),
    "krea_gpu_xid_last": (
        GAUGE,
        "Code of the last XID; exported only within the XID window after it happened.",
        (),
    ),
    "krea_gpu_xid_last_timestamp_seconds": (
        GAUGE,
        "Unix time of the last XID seen since the exporter started.",
        (),
    ),
    "krea_gpu_nvlink_links": (GAUGE, "NVLinks found on this GPU.", ()),
    "krea_gpu_nvlink_links_up": (
        GAUGE,
        "NVLinks of this GPU whose state is enabled (active).",
        (),
    ),
    "krea_gpu_nvlink_errors_total": (
        COUNTER,
        "NVLink data-link errors summed over the GPU's links (the per-link "
        "krea_nvlink_errors_total); absent in a scrape where a link's read failed.",
        ("counter",),
    ),
    "krea_nvlink_state": (GAUGE, "1 if the NVLink is active, else 0.", ("link",)),
    "krea_nvlink_errors_total": (
        COUNTER,
        "NVLink data-link errors per link (nvmlDeviceGetNvLinkErrorCounter).",
        ("link", "counter"),
    ),
}

NODE_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "krea_gpu_nvml_errors_total": (
        COUNTER,
        "NVML calls that failed, by error kind (snake_case of the pynvml error class, or "
        "unexpected); gpu is empty for node-wide calls.",
        ("node", "gpu", "kind"),
    ),
    "krea_gpu_nvml_calls_hung": (
        GAUGE,
        "NVML calls running past the per-call timeout: their GPUs read krea_gpu_up 0 "
        "(reason timeout) until the call returns; each holds one exporter thread.",
        ("node",),
    ),
    "krea_gpu_driver_info": (
        GAUGE,
        "NVIDIA driver version; value is 1.",
        ("node", "driver_version"),
    ),
}

_DOWN_ERRORS = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)
_ABSENT_FOREVER = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
_NOT_A_LINK = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_InvalidArgument,
    pynvml.NVMLError_FunctionNotFound,
)


class NvmlUnavailable(KreaError):
    """NVML could not be loaded or initialised on this machine (one-line reason)."""


def load_nvml() -> Any:
    """Import pynvml and call nvmlInit(); the module is the ``nvml`` a collector uses."""
    try:
        import pynvml as module
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise NvmlUnavailable(f"nvidia-ml-py (pynvml) is not installed: {exc}") from None
    try:
        module.nvmlInit()
    except module.NVMLError_LibraryNotFound:
        raise NvmlUnavailable(
            "libnvidia-ml.so.1 not found: no NVIDIA driver installed or visible here"
        ) from None
    except module.NVMLError_DriverNotLoaded:
        raise NvmlUnavailable("NVIDIA driver is not loaded (nvmlInit: Driver Not Loaded)") from None
    except module.NVMLError_NoPermission:
        raise NvmlUnavailable("no permission to open the NVIDIA devices (nvmlInit)") from None
    except module.NVMLError_LibRmVersionMismatch:
        raise NvmlUnavailable(
            "NVML library and kernel driver versions differ (reload the driver or reboot)"
        ) from None
    except module.NVMLError as exc:
        raise NvmlUnavailable(_one_line(f"nvmlInit failed: {_describe(exc)}")) from None
    except Exception as exc:
        raise NvmlUnavailable(_one_line(f"nvmlInit failed: {type(exc).__name__}: {exc}")) from None
    return module


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _describe(exc: Exception) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # str(NVMLError) may call into the library
        return type(exc).__name__


def error_kind(exc: BaseException) -> str:
    """``NVMLError_GpuIsLost`` -> ``gpu_is_lost``; non-NVML exceptions -> ``unexpected``."""
    if not isinstance(exc, pynvml.NVMLError):
        return "unexpected"
    name = type(exc).__name__
    if not name.startswith("NVMLError_"):
        return "nvml_error"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name[len("NVMLError_") :]).lower()


def _field_value(v: Any) -> float:
    """The union member of a c_nvmlFieldValue_t that its valueType names."""
    member = {
        _const("NVML_VALUE_TYPE_DOUBLE", 0): "dVal",
        _const("NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
        _const("NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
        _const("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
        _const("NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
        _const("NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
        _const("NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): "usVal",
    }.get(v.valueType)
    if member is None:
        raise ValueError(f"unknown NVML valueType {v.valueType}")
    return float(getattr(v.value, member))


def _address(pointer: Any) -> int:
    return int(ctypes.cast(pointer, ctypes.c_void_p).value or 0)


class _GpuDown(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class _GpmReading:
    values: dict[str, float]
    wall_time: float
    window_s: float
    mono_time: float


class _Gpu:
    """What the collector keeps about one GPU between scrapes."""

    def __init__(self, index: int, node: str) -> None:
        self.index = index
        self.label = str(index)
        self.node = node
        self.lock = threading.Lock()  # identity and NVLink discovery
        self.gpm_lock = threading.Lock()  # GPM samples
        self.handle: Any = None
        self.labels: tuple[str, ...] | None = None
        self.unsupported: set[Any] = set()
        self.links: tuple[int, ...] | None = None
        self.gpm_supported: bool | None = None
        self.gpm_prev: Any = None
        self.gpm_prev_mono = 0.0
        self.gpm: _GpmReading | None = None
        self.gpm_step_started: float | None = None  # a GPM step on this GPU is running
        self.gpm_stuck = False  # ... and has run past the call timeout (its thread left)
        self.xid_counts: dict[int, int] = {}
        self.xid_last: int | None = None
        self.xid_last_wall = 0.0
        self.xid_last_mono = 0.0
        self.xid_monitored = False
        # the read in progress or last finished (one at a time: see GpuCollector._submit)
        self.job: _Job | None = None
        # NVLink sums kept from increases: (link, counter label) -> last raw value
        self.link_last: dict[tuple[int, str], float] = {}
        self.link_sums: dict[str, float] = {}

    def identity(self) -> tuple[str, ...]:
        return self.labels or (self.node, self.label, "", "", "")


Reading = tuple[str, tuple[str, ...], float]


class _Job:
    """One read of one GPU, queued in a scrape's batch until a reader thread takes it."""

    __slots__ = (
        "batch",
        "call_started",
        "done",
        "dropped",
        "error",
        "given_up",
        "gpu",
        "hung",
        "readings",
        "started",
    )

    def __init__(self, gpu: _Gpu, batch: deque[_Job]) -> None:
        self.gpu = gpu
        self.batch = batch  # the queue it is in; a reader takes jobs from its left
        self.done = threading.Event()
        self.readings: list[Reading] = []
        self.error: BaseException | None = None
        self.started = False  # taken by a reader
        self.call_started = 0.0  # when its current (or last) NVML call started
        self.given_up = False  # a scrape stopped waiting for it: later ones do not wait
        self.hung = False  # its call ran past the per-call timeout; it holds its thread
        self.dropped = False  # taken out of its batch unread (the scrape's deadline came)


_DONE, _HUNG, _UNREAD = object(), object(), object()


class GpuCollector:
    """Per-GPU and per-NVLink metrics for one node, from ``nvml`` (pynvml or FakeNvml)."""

    name = "gpu"

    def __init__(
        self,
        nvml: Any,
        node: str = "",
        *,
        gpm_interval_s: float = 1.0,
        xid_window_s: float = 600.0,
        event_wait_ms: int = 500,
        call_timeout_s: float = 5.0,
        scrape_timeout_s: float = 8.0,
    ) -> None:
        if not (call_timeout_s > 0 and scrape_timeout_s > 0):
            raise ValueError("NVML call and scrape timeouts must be more than 0 seconds")
        self._nvml = nvml
        self._call_timeout_s = float(call_timeout_s)
        self._scrape_timeout_s = float(scrape_timeout_s)
        self._local = threading.local()  # .job: the _Job a reader thread works for
        self._node = node
        self._gpm_interval_s = max(float(gpm_interval_s), 0.001)
        self._gpm_stale_s = max(5 * self._gpm_interval_s, 5.0)
        self._xid_window_s = float(xid_window_s)
        self._event_wait_ms = max(int(event_wait_ms), 1)
        self._lock = threading.Lock()  # errors, caches read by collect()
        self._discover_lock = threading.Lock()
        self._gpus: list[_Gpu] | None = None
        self._by_address: dict[int, _Gpu] = {}
        self._driver: str | None = None
        self._errors: dict[tuple[str, str], int] = {}
        self._missing_functions: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._event_set: Any = None
        self._started = False
        self._closed = False
        self._gpm_generation = 0  # a GPM thread of an older generation ends

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Discover the GPUs, register for XID events, start the GPM and XID threads."""
        with self._discover_lock:
            if self._started or self._closed:
                return
            self._started = True
        gpus = self._discover()
        for g in gpus:
            try:
                self._identify(g)
            except Exception as exc:
                self._count(g.label, error_kind(exc))
        self._event_set = self._register_events(gpus)
        gpm = threading.Thread(target=self._gpm_loop, args=(0,), name="krea-gpu-gpm", daemon=True)
        self._threads.append(gpm)
        if self._event_set is not None:
            xid = threading.Thread(
                target=self._event_loop, args=(self._event_set,), name="krea-gpu-xid", daemon=True
            )
            self._threads.append(xid)
        for t in self._threads:
            t.start()

    def describe(self) -> list[Metric]:
        return []

    def close(self) -> None:
        """Stop the threads, free GPM samples and the event set, shut NVML down."""
        with self._discover_lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        event_thread_done = True
        deadline = time.monotonic() + self._event_wait_ms / 1000.0 + 5.0
        for t in list(self._threads):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
            if t.is_alive() and t.name == "krea-gpu-xid":
                event_thread_done = False
        for g in self._gpus or []:
            # a GPM step stuck in NVML holds its GPU's lock: leave that sample be
            if not g.gpm_lock.acquire(timeout=1.0):
                continue
            try:
                if g.gpm_prev is not None:
                    self._free_sample(g.gpm_prev)
                    g.gpm_prev = None
            finally:
                g.gpm_lock.release()
        if self._event_set is not None and event_thread_done:
            try:
                self._nvml.nvmlEventSetFree(self._event_set)
            except Exception as exc:
                self._count("", error_kind(exc))
            self._event_set = None
        try:
            self._nvml.nvmlShutdown()
        except Exception as exc:
            self._count("", error_kind(exc))

    # -- scrape ---------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """All GPU families for this scrape, within ``scrape_timeout_s``. Never raises."""
        try:
            families = self._collect()
        except Exception:
            self._count("", "unexpected")
            families = []
            try:
                families = [self._errors_family()]
            except Exception:
                families = []
        yield from families

    def _collect(self) -> list[Metric]:
        if self._closed:
            return []
        gpus = self._discover()
        if self._started:
            self._watch_gpm(gpus)
        jobs = self._submit(gpus)
        deadline = time.monotonic() + self._scrape_timeout_s
        readings: list[tuple[tuple[str, ...], list[Reading]]] = []
        for g, job in zip(gpus, jobs, strict=True):
            out: list[Reading]
            outcome = self._await(g, job, deadline)
            if outcome is _HUNG:
                out = [("krea_gpu_up", (), 0.0), ("krea_gpu_down_info", ("timeout",), 1.0)]
            elif outcome is _UNREAD:  # no time for it: unknown this scrape, not down
                out = []
            elif (exc := job.error) is None:
                out = [*job.readings, ("krea_gpu_up", (), 1.0)]
            else:
                kind = exc.kind if isinstance(exc, _GpuDown) else error_kind(exc)
                self._count(g.label, kind)
                out = [("krea_gpu_up", (), 0.0), ("krea_gpu_down_info", (kind,), 1.0)]
            out.extend(self._event_readings(g))
            readings.append((g.identity(), out))
        return self._families(readings)

    def _submit(self, gpus: list[_Gpu]) -> list[_Job]:
        """The read of each GPU for this scrape: the one in progress, if there is one
        (another scrape's, or one stuck in NVML), else a new one. New ones are queued in
        one batch that one reader thread works through, GPU after GPU (threads per GPU
        cost more CPU than the reads); a reader stuck in a call is replaced (_declare_hung)."""
        jobs: list[_Job] = []
        batch: deque[_Job] = deque()
        with self._lock:
            for g in gpus:
                job = g.job
                if job is None or job.done.is_set():
                    job = g.job = _Job(g, batch)
                    batch.append(job)
                jobs.append(job)
        if batch:
            self._start_reader(batch)
        return jobs

    def _start_reader(self, batch: deque[_Job]) -> None:
        thread = threading.Thread(
            target=self._reader, args=(batch,), name="krea-gpu-read", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: this scrape only, try again next
            with self._lock:
                jobs = list(batch)
                batch.clear()
            for job in jobs:
                job.error = exc
                job.done.set()

    def _reader(self, batch: deque[_Job]) -> None:
        while True:
            with self._lock:
                if not batch:
                    return
                job = batch.popleft()
                job.started = True
                job.call_started = time.monotonic()
            self._local.job = job
            try:
                job.readings = self._read_gpu(job.gpu)
            except BaseException as exc:  # handed to the scrape, which reports it
                job.error = exc
            finally:
                self._local.job = None
                job.done.set()

    def _await(self, g: _Gpu, job: _Job, deadline: float) -> object:
        """Wait for a GPU's read until the scrape's deadline, or until its current NVML
        call has run ``call_timeout_s``: _DONE, _HUNG (a call past the per-call timeout:
        the GPU is not answering) or _UNREAD (the deadline came first, or the read ended
        after it was declared hung: nothing is known of the GPU this scrape)."""
        while True:
            if job.done.is_set():
                return _UNREAD if job.dropped or job.hung else _DONE
            now = time.monotonic()
            if job.started and now - job.call_started >= self._call_timeout_s:
                if self._declare_hung(g, job):
                    return _HUNG
                continue  # it has just finished
            if job.given_up or now >= deadline:
                if self._drop(job):
                    return _UNREAD
                continue
            # a queued read's clock starts when a reader takes it
            started = job.call_started if job.started else now
            job.done.wait(max(0.0, min(deadline, started + self._call_timeout_s) - now))

    def _declare_hung(self, g: _Gpu, job: _Job) -> bool:
        """A reader stuck in a call: counted once as a ``timeout``; another reader takes
        the rest of its batch (the stuck one, when its call returns, helps or ends).
        False if the read has finished after all."""
        with self._lock:
            if job.done.is_set():
                return False
            if job.hung:
                return True
            job.hung = job.given_up = True
            key = (g.label, "timeout")
            self._errors[key] = self._errors.get(key, 0) + 1
            more = bool(job.batch)
        if more:
            self._start_reader(job.batch)
        return True

    def _drop(self, job: _Job) -> bool:
        """The scrape's deadline came: a read still queued leaves its batch (the GPU is
        read again next scrape); one in progress is not waited for by later scrapes.
        False if the read has finished after all."""
        with self._lock:
            if job.done.is_set():
                return False
            job.given_up = True
            if not job.started:
                job.batch.remove(job)
                job.dropped = True
                job.done.set()
        return True

    def _families(self, readings: list[tuple[tuple[str, ...], list[Reading]]]) -> list[Metric]:
        families: dict[str, Any] = {}
        for name, (kind, help_text, extra) in METRICS.items():
            cls = CounterMetricFamily if kind == COUNTER else GaugeMetricFamily
            families[name] = cls(name, help_text, labels=[*IDENTITY_LABELS, *extra])
        used: set[str] = set()
        for identity, out in readings:
            for name, extra_values, value in out:
                families[name].add_metric([*identity, *extra_values], value)
                used.add(name)
        result = [families[n] for n in METRICS if n in used]
        result.append(self._errors_family())
        result.append(self._hung_family())
        if self._driver is not None:
            kind, help_text, labels = NODE_METRICS["krea_gpu_driver_info"]
            info = GaugeMetricFamily("krea_gpu_driver_info", help_text, labels=list(labels))
            info.add_metric([self._node, self._driver], 1.0)
            result.append(info)
        return [f for f in result if f.samples]

    def _errors_family(self) -> Metric:
        _, help_text, labels = NODE_METRICS["krea_gpu_nvml_errors_total"]
        family = CounterMetricFamily("krea_gpu_nvml_errors_total", help_text, labels=list(labels))
        with self._lock:
            errors = sorted(self._errors.items())
        for (gpu, kind), count in errors:
            family.add_metric([self._node, gpu, kind], float(count))
        return family

    def _hung_family(self) -> Metric:
        _, help_text, labels = NODE_METRICS["krea_gpu_nvml_calls_hung"]
        family = GaugeMetricFamily("krea_gpu_nvml_calls_hung", help_text, labels=list(labels))
        with self._lock:
            hung = sum(
                1
                for g in self._gpus or []
                if g.job is not None and g.job.hung and not g.job.done.is_set()
            )
        family.add_metric([self._node], float(hung))
        return family

    # -- discovery ------------------------------------------------------------------

    def _discover(self) -> list[_Gpu]:
        with self._discover_lock:
            if self._gpus is None:
                try:
                    count = int(self._nvml.nvmlDeviceGetCount())
                except Exception as exc:
                    self._count("", error_kind(exc))
                    return []
                self._gpus = [_Gpu(i, self._node) for i in range(count)]
            if self._driver is None:
                try:
                    self._driver = str(self._nvml.nvmlSystemGetDriverVersion())
                except Exception as exc:
                    self._count("", error_kind(exc))
            return list(self._gpus)

    def _identify(self, g: _Gpu) -> Any:
        """The GPU's handle; reads and caches its identity labels on first success."""
        if g.labels is not None:
            return g.handle
        with g.lock:
            if g.labels is None:
                fn = self._fn
                handle = fn("nvmlDeviceGetHandleByIndex")(g.index)
                uuid = str(fn("nvmlDeviceGetUUID")(handle))
                model = str(fn("nvmlDeviceGetName")(handle))
                bus_id = fn("nvmlDeviceGetPciInfo")(handle).busId
                if isinstance(bus_id, bytes):
                    bus_id = bus_id.decode("ascii", "replace")
                g.handle = handle
                with self._lock:
                    self._by_address[_address(handle)] = g
                g.labels = (self._node, g.label, uuid, str(bus_id), model)
        return g.handle

    # -- one GPU --------------------------------------------------------------------

    def _count(self, gpu: str, kind: str) -> None:
        with self._lock:
            self._errors[(gpu, kind)] = self._errors.get((gpu, kind), 0) + 1

    def _fn(self, name: str) -> Callable[..., Any]:
        """The NVML function ``name``, about to be called (the call's clock starts)."""
        fn = getattr(self._nvml, name, None)
        if fn is None:  # an nvidia-ml-py too old to have it
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        job = getattr(self._local, "job", None)
        if job is not None:
            job.call_started = time.monotonic()
        return fn  # type: ignore[no-any-return]

    def _call(self, g: _Gpu, key: Any, function: str, *args: Any) -> Any:
        """One NVML read: the value, or None when the series must be absent.

        Lost/reset GPUs raise _GpuDown; NotSupported/FunctionNotFound are remembered
        per GPU and key so they are asked (and counted) once.
        """
        with self._lock:
            if key in g.unsupported:
                return None
        try:
            return self._fn(function)(*args)
        except _DOWN_ERRORS as exc:
            raise _GpuDown(error_kind(exc)) from None
        except _ABSENT_FOREVER as exc:
            with self._lock:
                g.unsupported.add(key)
            self._count(g.label, error_kind(exc))
        except pynvml.NVMLError as exc:
            self._count(g.label, error_kind(exc))
        return None

    def _call_new_or_old(self, g: _Gpu, key: Any, new: str, old: str, *args: Any) -> Any:
        """Call ``new``; if this driver lacks it, use the deprecated ``old`` from now on."""
        with self._lock:
            use_old = new in self._missing_functions
        if not use_old:
            try:
                return self._fn(new)(*args)
            except pynvml.NVMLError_FunctionNotFound:
                with self._lock:
                    self._missing_functions.add(new)
            except _DOWN_ERRORS as exc:
                raise _GpuDown(error_kind(exc)) from None
            except _ABSENT_FOREVER as exc:
                with self._lock:
                    g.unsupported.add(key)
                self._count(g.label, error_kind(exc))
                return None
            except pynvml.NVMLError as exc:
                self._count(g.label, error_kind(exc))
                return None
        return self._call(g, key, old, *args)

    def _returned(self, g: _Gpu, key: Any, code: int) -> None:
        """Handle a non-success nvmlReturn found inside a field-value or GPM array."""
        exc = pynvml.NVMLError(code)
        if isinstance(exc, _DOWN_ERRORS):
            raise _GpuDown(error_kind(exc))
        if isinstance(exc, _ABSENT_FOREVER):
            with self._lock:
                g.unsupported.add(key)
        self._count(g.label, error_kind(exc))

    def _read_gpu(self, g: _Gpu) -> list[Reading]:
        h = self._identify(g)
        out: list[Reading] = []

        def put(name: str, value: Any, *extra: str) -> None:
            if value is not None:
                out.append((name, extra, float(value)))

        temp = self._call_new_or_old(
            g,
            "temperature",
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetTemperature",
            h,
            NVML_TEMPERATURE_GPU,
        )
        put("krea_gpu_temperature_celsius", temp)
        self._memory_temperature(g, h, put)
        thresholds = {}
        for name, threshold in (
            ("krea_gpu_slowdown_temperature_celsius", THRESHOLD_SLOWDOWN),
            ("krea_gpu_shutdown_temperature_celsius", THRESHOLD_SHUTDOWN),
            ("krea_gpu_max_operating_temperature_celsius", THRESHOLD_GPU_MAX),
            ("krea_gpu_memory_max_operating_temperature_celsius", THRESHOLD_MEM_MAX),
        ):
            value = self._call(
                g,
                ("threshold", threshold),
                "nvmlDeviceGetTemperatureThreshold",
                h,
                threshold,
            )
            thresholds[threshold] = value
            put(name, value)
        margin = self._call(g, "margin", "nvmlDeviceGetMarginTemperature", h)
        slowdown = thresholds[THRESHOLD_SLOWDOWN]
        if margin is None and slowdown is not None and temp is not None:
            margin = slowdown - temp
        put("krea_gpu_slowdown_margin_celsius", margin)

        power = self._call(g, "power", "nvmlDeviceGetPowerUsage", h)
        put("krea_gpu_power_watts", None if power is None else power / 1000.0)
        limit = self._call(g, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        put("krea_gpu_power_limit_watts", None if limit is None else limit / 1000.0)
        energy = self._call(g, "energy", "nvmlDeviceGetTotalEnergyConsumption", h)
        put("krea_gpu_energy_joules_total", None if energy is None else energy / 1000.0)

        sm = self._call(g, ("clock", CLOCK_SM), "nvmlDeviceGetClockInfo", h, CLOCK_SM)
        put("krea_gpu_sm_clock_hertz", None if sm is None else sm * 1e6)
        top = self._call(g, ("max_clock", CLOCK_SM), "nvmlDeviceGetMaxClockInfo", h, CLOCK_SM)
        put("krea_gpu_sm_clock_max_hertz", None if top is None else top * 1e6)
        mem = self._call(g, ("clock", CLOCK_MEM), "nvmlDeviceGetClockInfo", h, CLOCK_MEM)
        put("krea_gpu_memory_clock_hertz", None if mem is None else mem * 1e6)

        util = self._call(g, "utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            put("krea_gpu_utilization_ratio", util.gpu / 100.0)
            put("krea_gpu_memory_utilization_ratio", util.memory / 100.0)
        memory = self._call(g, "memory", "nvmlDeviceGetMemoryInfo", h)
        if memory is not None:
            put("krea_gpu_memory_used_bytes", memory.used)
            put("krea_gpu_memory_total_bytes", memory.total)

        reasons = self._call_new_or_old(
            g,
            "clock_events",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            h,
        )
        if reasons is not None:
            for label, bit in CLOCK_EVENT_REASONS:
                put("krea_gpu_clock_event_active", 1.0 if reasons & bit else 0.0, label)
            put("krea_gpu_clock_event_reasons", float(reasons))

        for error_type, counter_type, et, ct in ECC_COUNTERS:
            count = self._call(g, ("ecc", et, ct), "nvmlDeviceGetTotalEccErrors", h, et, ct)
            put("krea_gpu_ecc_errors_total", count, error_type, counter_type)

        rows = self._call(g, "remapped_rows", "nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            correctable, uncorrectable, pending, failed = rows
            put("krea_gpu_remapped_rows_total", correctable, "correctable")
            put("krea_gpu_remapped_rows_total", uncorrectable, "uncorrectable")
            put("krea_gpu_row_remap_pending", 1.0 if pending else 0.0)
            put("krea_gpu_row_remap_failed", 1.0 if failed else 0.0)

        links = self._links(g, h)
        # Per-GPU sums, so a fleet-wide read never touches the 72 per-link series of each
        # GPU. They are kept from each link's increase since the last read, a link counter
        # that went down (reset, e.g. nvmlDeviceResetNvLinkErrorCounters) adding its new
        # value: summing raw values instead, one link's reset would make the sum drop,
        # and rate() would read that as a reset of the sum and count the other links'
        # errors again as a burst. A sum is left out of a scrape where a link's read
        # failed (that link's increase is added when it answers again). Counters
        # NotSupported on a link are left out of the sum every scrape alike.
        up: float | None = 0.0
        unread: set[str] = set()  # counters a link could not be read for this scrape
        read: set[str] = set()  # counters at least one link answered
        last, kept = g.link_last, g.link_sums
        for link in links:
            state = self._call(g, ("nvlink_state", link), "nvmlDeviceGetNvLinkState", h, link)
            if state is not None:
                active = state == FEATURE_ENABLED
                put("krea_nvlink_state", 1.0 if active else 0.0, str(link))
                if up is not None and active:
                    up += 1.0
            else:
                up = None
            for label, counter in NVLINK_COUNTERS:
                key = ("nvlink_error", link, counter)
                value = self._call(g, key, "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
                put("krea_nvlink_errors_total", value, str(link), label)
                if value is not None:
                    now = float(value)
                    before = last.get((link, label))
                    last[(link, label)] = now
                    increase = now if before is None or now < before else now - before
                    kept[label] = kept.get(label, 0.0) + increase
                    read.add(label)
                elif key not in g.unsupported:
                    unread.add(label)
        if g.links is not None:  # discovery finished (0 for a GPU without NVLink)
            put("krea_gpu_nvlink_links", len(links))
            put("krea_gpu_nvlink_links_up", up)
            for label, _ in NVLINK_COUNTERS:
                if label in read and label not in unread:
                    put("krea_gpu_nvlink_errors_total", kept[label], label)

        out.extend(self._gpm_readings(g))
        return out

    def _memory_temperature(self, g: _Gpu, h: Any, put: Callable[..., None]) -> None:
        key = ("field", FI_DEV_MEMORY_TEMP)
        with self._lock:
            if key in g.unsupported:
                return
        values = self._call(g, "field_values", "nvmlDeviceGetFieldValues", h, [FI_DEV_MEMORY_TEMP])
        if values is None or len(values) < 1:
            return
        v = values[0]
        if v.nvmlReturn != NVML_SUCCESS:
            self._returned(g, key, v.nvmlReturn)
            return
        put("krea_gpu_memory_temperature_celsius", _field_value(v))

    def _links(self, g: _Gpu, h: Any) -> tuple[int, ...]:
        """NVLinks of this GPU, probed once (NVML_NVLINK_MAX_LINKS calls) and cached."""
        if g.links is not None:
            return g.links
        with g.lock:
            if g.links is None:
                found = []
                fn: Callable[..., Any] | None = getattr(
                    self._nvml, "nvmlDeviceGetNvLinkState", None
                )
                for link in range(NVLINK_MAX_LINKS):
                    if fn is None:
                        break
                    try:
                        self._fn("nvmlDeviceGetNvLinkState")(h, link)
                    except _DOWN_ERRORS as exc:
                        raise _GpuDown(error_kind(exc)) from None
                    except _NOT_A_LINK:
                        continue
                    except pynvml.NVMLError as exc:  # try the probe again next scrape
                        self._count(g.label, error_kind(exc))
                        return ()
                    found.append(link)
                g.links = tuple(found)
        return g.links

    def _gpm_readings(self, g: _Gpu) -> list[Reading]:
        with self._lock:
            reading = g.gpm
        if reading is None:
            return []
        out: list[Reading] = [
            ("krea_gpu_gpm_sample_timestamp_seconds", (), reading.wall_time),
            ("krea_gpu_gpm_window_seconds", (), reading.window_s),
        ]
        if time.monotonic() - reading.mono_time <= self._gpm_stale_s:
            out.extend((name, (), value) for name, value in reading.values.items())
        return out

    def _event_readings(self, g: _Gpu) -> list[Reading]:
        if not self._started:
            return []
        with self._lock:
            counts = sorted(g.xid_counts.items())
            last, last_wall, last_mono = g.xid_last, g.xid_last_wall, g.xid_last_mono
            monitored = g.xid_monitored
        out: list[Reading] = [("krea_gpu_xid_monitored", (), 1.0 if monitored else 0.0)]
        out.extend(("krea_gpu_xid_errors_total", (str(xid),), float(n)) for xid, n in counts)
        if last is not None:
            out.append(("krea_gpu_xid_last_timestamp_seconds", (), last_wall))
            if time.monotonic() - last_mono <= self._xid_window_s:
                out.append(("krea_gpu_xid_last", (), float(last)))
        return out

    # -- GPM ------------------------------------------------------------------------

    def _gpm_loop(self, generation: int) -> None:
        while not self._stop.is_set() and generation == self._gpm_generation:
            try:
                self.sample_gpm(generation)
            except Exception:
                self._count("", "unexpected")
            if self._stop.wait(self._gpm_interval_s):
                return

    def _watch_gpm(self, gpus: list[_Gpu]) -> None:
        """Called by each scrape: if the GPM thread has been stuck in one GPU's NVML call
        for ``call_timeout_s``, start another GPM thread that leaves that GPU out until
        the call returns (the stuck thread then ends), so one GPU cannot stop tensor
        activity of all the others."""
        now = time.monotonic()
        with self._lock:
            stuck = [
                g
                for g in gpus
                if not g.gpm_stuck
                and g.gpm_step_started is not None
                and now - g.gpm_step_started >= self._call_timeout_s
            ]
            if not stuck or self._closed:
                return
            for g in stuck:
                g.gpm_stuck = True
            self._gpm_generation += 1
            generation = self._gpm_generation
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(
                target=self._gpm_loop, args=(generation,), name="krea-gpu-gpm", daemon=True
            )
            self._threads.append(thread)
        with contextlib.suppress(RuntimeError):  # no thread to be had: try at next scrape
            thread.start()

    def sample_gpm(self, generation: int | None = None) -> None:
        """One GPM round: what the background thread does every ``gpm_interval_s``.

        Takes a new sample on every GPM-capable GPU and, where a previous sample
        exists, computes the metrics over the pair and frees the older sample. A GPU
        whose GPM step is still running on a stuck thread is left out.
        """
        for g in self._discover():
            if self._closed:
                return
            with self._lock:
                if generation is not None and generation != self._gpm_generation:
                    return  # a newer GPM thread has taken over
                if g.gpm_step_started is not None:
                    continue
                g.gpm_step_started = time.monotonic()
            try:
                if g.gpm_supported is None:
                    self._query_gpm_support(g)
                if g.gpm_supported:
                    with g.gpm_lock:
                        if not self._closed:
                            self._gpm_step(g)
            except Exception as exc:
                self._count(g.label, error_kind(exc))
            finally:
                with self._lock:
                    g.gpm_step_started = None
                    g.gpm_stuck = False

    def _query_gpm_support(self, g: _Gpu) -> None:
        try:
            h = self._identify(g)
            support = self._fn("nvmlGpmQueryDeviceSupport")(h)
        except _ABSENT_FOREVER as exc:
            g.gpm_supported = False
            self._count(g.label, error_kind(exc))
            return
        except pynvml.NVMLError as exc:  # lost, or transient: ask again next round
            self._count(g.label, error_kind(exc))
            return
        g.gpm_supported = bool(support.isSupportedDevice)

    def _free_sample(self, sample: Any) -> None:
        try:
            self._nvml.nvmlGpmSampleFree(sample)
        except Exception as exc:
            self._count("", error_kind(exc))

    def _drop_gpm(self, g: _Gpu) -> None:
        if g.gpm_prev is not None:
            self._free_sample(g.gpm_prev)
            g.gpm_prev = None
        with self._lock:
            g.gpm = None

    def _gpm_step(self, g: _Gpu) -> None:
        nvml = self._nvml
        try:
            sample = nvml.nvmlGpmSampleAlloc()
        except pynvml.NVMLError as exc:
            self._count("", error_kind(exc))
            return
        try:
            nvml.nvmlGpmSampleGet(g.handle, sample)
        except pynvml.NVMLError as exc:
            self._free_sample(sample)
            self._count(g.label, error_kind(exc))
            if isinstance(exc, _DOWN_ERRORS):
                self._drop_gpm(g)
            elif isinstance(exc, _ABSENT_FOREVER):
                self._drop_gpm(g)
                g.gpm_supported = False
            return
        now_mono, now_wall = time.monotonic(), time.time()
        prev, prev_mono = g.gpm_prev, g.gpm_prev_mono
        g.gpm_prev, g.gpm_prev_mono = sample, now_mono
        if prev is None:
            return
        try:
            values = self._gpm_metrics(g, prev, sample)
        finally:
            self._free_sample(prev)
        if values is not None:
            reading = _GpmReading(values, now_wall, now_mono - prev_mono, now_mono)
            with self._lock:
                g.gpm = reading

    def _gpm_metrics(self, g: _Gpu, older: Any, newer: Any) -> dict[str, float] | None:
        with self._lock:
            wanted = [(m, n) for m, n in GPM_METRICS if ("gpm", m) not in g.unsupported]
        if not wanted:
            return None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = older
        request.sample2 = newer
        for i, (metric_id, _) in enumerate(wanted):
            request.metrics[i].metricId = metric_id
        try:
            self._nvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError as exc:
            self._count(g.label, error_kind(exc))
            return None
        values: dict[str, float] = {}
        for i, (metric_id, name) in enumerate(wanted):
            metric = request.metrics[i]
            if metric.nvmlReturn != NVML_SUCCESS:
                try:
                    self._returned(g, ("gpm", metric_id), metric.nvmlReturn)
                except _GpuDown:
                    return None
                continue
            values[name] = min(max(float(metric.value) / 100.0, 0.0), 1.0)
        return values

    # -- XID events -----------------------------------------------------------------

    def _register_events(self, gpus: list[_Gpu]) -> Any:
        try:
            event_set = self._nvml.nvmlEventSetCreate()
        except Exception as exc:
            self._count("", error_kind(exc))
            return None
        registered = 0
        for g in gpus:
            if g.handle is None:
                continue
            try:
                self._nvml.nvmlDeviceRegisterEvents(g.handle, EVENT_XID, event_set)
            except Exception as exc:
                self._count(g.label, error_kind(exc))
                continue
            with self._lock:
                g.xid_monitored = True
            registered += 1
        if registered == 0:
            try:
                self._nvml.nvmlEventSetFree(event_set)
            except Exception as exc:
                self._count("", error_kind(exc))
            return None
        return event_set

    def _event_loop(self, event_set: Any) -> None:
        while not self._stop.is_set():
            try:
                data = self._fn("nvmlEventSetWait")(event_set, self._event_wait_ms)
            except pynvml.NVMLError_Timeout:
                continue
            except Exception as exc:  # do not spin on a persistent error
                self._count("", error_kind(exc))
                self._stop.wait(min(1.0, self._event_wait_ms / 1000.0))
                continue
            try:
                self._record_event(data)
            except Exception:
                self._count("", "unexpected")

    def _record_event(self, data: Any) -> None:
        if not int(data.eventType) & EVENT_XID:
            return
        with self._lock:
            g = self._by_address.get(_address(data.device))
            if g is None:
                return
            xid = int(data.eventData)
            g.xid_counts[xid] = g.xid_counts.get(xid, 0) + 1
            g.xid_last = xid
            g.xid_last_wall = time.time()
            g.xid_last_mono = time.monotonic()
