"""InfiniBand port counters from sysfs (``<root>/class/infiniband``).

A prometheus_client custom collector. Metric names follow node_exporter's
``infiniband`` collector with ``node_infiniband_`` replaced by ``krea_ib_``; the
differences are deliberate:

* every per-port series carries ``node``, ``device`` and ``port``;
* 64-bit counters win: ``counters_ext/port_rcv_data_64`` (and the other ``counters_ext``
  files) is *the* value of ``krea_ib_port_data_received_bytes_total`` when present, and
  there are no separate ``legacy_*`` families;
* ``hw_counters/*`` is exported generically (``krea_ib_hw_counters_total{counter}``), so
  counters of newer drivers appear without code changes; unknown files in ``counters/``
  and ``counters_ext/`` become ``krea_ib_port_other_counters_total{counter}``;
* PMA counters saturate at all-ones instead of wrapping, so every counter of known width
  also gets ``krea_ib_port_counters_saturated{counter}`` (1 when stuck at 2^width - 1).
  The plural ``counters`` in this name and in ``hw_counters_total``/``other_counters_total``
  is because ``promtool check metrics`` rejects ``_counter_`` inside a metric name;
* one unreadable or garbage file costs only its own series and is counted in
  ``krea_ib_read_errors_total{file}``; it never fails the scrape.

Read-error policy (per file, per scrape):

* absent, not an error: text containing ``N/A`` (``N/A (no PMA)``), and a read that fails
  with EINVAL, EOPNOTSUPP or ENODATA (how newer kernels say "this counter is not
  supported"); an optional device file (``board_id``, ``hca_type``, ``node_guid``,
  ``fw_ver``) that does not exist;
* stale, not an error: ENODEV, ENXIO, EBADF or ESTALE on a cached descriptor, or ENOENT
  for a file or port that has disappeared: the tree is rediscovered at once and read
  again in the same scrape (errors on that second read count);
* an error (``krea_ib_read_errors_total`` + 1): everything else, e.g. non-numeric text,
  a negative number, EIO, EISDIR (a directory where a file should be), EACCES/EPERM
  (a permission problem an operator can fix), a dangling symlink, or a missing
  ``state``/``phys_state``/``rate``/``link_layer``.

Speed: the tree is discovered once (again every ``rediscover_s`` seconds, or at once
when a cached descriptor goes stale); every file is kept open and re-read with
``os.pread(fd, n, 0)`` (sysfs regenerates the text at offset 0; files rewritten in place
show their new contents). Device info and ``link_layer`` are read at discovery only.
At most ``max_open_files`` descriptors are cached (default: half the soft
RLIMIT_NOFILE); files beyond that are opened, read and closed on every scrape.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import resource
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from krea_ops.errors import BadInput

__all__ = ["InfinibandCollector"]

# ---------------------------------------------------------------------------------------
# Metric families. Index constants below must match the order of _FAMILIES.

_PORT = ("node", "device", "port")
_FAMILIES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (name without _total, type, help, label names)
    (
        "krea_ib_port_data_received_bytes",
        "counter",
        "Data octets received on the port (sysfs counts 4-byte words; multiplied by 4). "
        "From counters_ext/port_rcv_data_64 when present, else counters/port_rcv_data.",
        _PORT,
    ),
    (
        "krea_ib_port_data_transmitted_bytes",
        "counter",
        "Data octets transmitted on the port (sysfs counts 4-byte words; multiplied by 4). "
        "From counters_ext/port_xmit_data_64 when present, else counters/port_xmit_data.",
        _PORT,
    ),
    (
        "krea_ib_port_packets_received",
        "counter",
        "Packets received on all VLs of the port, including errors.",
        _PORT,
    ),
    (
        "krea_ib_port_packets_transmitted",
        "counter",
        "Packets transmitted on all VLs of the port, including errors.",
        _PORT,
    ),
    (
        "krea_ib_unicast_packets_received",
        "counter",
        "Unicast packets received, including errors.",
        _PORT,
    ),
    (
        "krea_ib_unicast_packets_transmitted",
        "counter",
        "Unicast packets transmitted, including errors.",
        _PORT,
    ),
    (
        "krea_ib_multicast_packets_received",
        "counter",
        "Multicast packets received, including errors.",
        _PORT,
    ),
    (
        "krea_ib_multicast_packets_transmitted",
        "counter",
        "Multicast packets transmitted, including errors.",
        _PORT,
    ),
    (
        "krea_ib_port_transmit_wait",
        "counter",
        "Ticks during which the port had data to send but sent nothing (congestion, "
        "back-pressure). 32-bit, saturates quickly.",
        _PORT,
    ),
    (
        "krea_ib_symbol_error",
        "counter",
        "Minor link errors on one or more physical lanes (cable, transceiver, connector).",
        _PORT,
    ),
    (
        "krea_ib_link_error_recovery",
        "counter",
        "Times the link successfully retrained after an error (a flaky link).",
        _PORT,
    ),
    (
        "krea_ib_link_downed",
        "counter",
        "Times link error recovery failed and the link went down.",
        _PORT,
    ),
    (
        "krea_ib_port_errors_received",
        "counter",
        "Packets received with an error (CRC, length, malformed, ...).",
        _PORT,
    ),
    (
        "krea_ib_port_receive_remote_physical_errors",
        "counter",
        "Packets received marked EBP (corrupted upstream, not on this link).",
        _PORT,
    ),
    (
        "krea_ib_port_receive_switch_relay_errors",
        "counter",
        "Packets the switch port could not forward.",
        _PORT,
    ),
    (
        "krea_ib_port_discards_received",
        "counter",
        "Inbound packets discarded because the port was down or congested.",
        _PORT,
    ),
    (
        "krea_ib_port_discards_transmitted",
        "counter",
        "Outbound packets discarded because the port was down or congested.",
        _PORT,
    ),
    (
        "krea_ib_port_constraint_errors_received",
        "counter",
        "Packets received that were discarded by partition or raw-packet filtering.",
        _PORT,
    ),
    (
        "krea_ib_port_constraint_errors_transmitted",
        "counter",
        "Packets not transmitted because of partition or raw-packet filtering.",
        _PORT,
    ),
    (
        "krea_ib_local_link_integrity_errors",
        "counter",
        "Times local physical errors exceeded the LocalPhyErrors threshold.",
        _PORT,
    ),
    (
        "krea_ib_excessive_buffer_overrun_errors",
        "counter",
        "Consecutive flow-control update periods with at least one input buffer overrun.",
        _PORT,
    ),
    (
        "krea_ib_vl15_dropped",
        "counter",
        "Subnet-management (VL15) packets dropped for lack of buffers.",
        _PORT,
    ),
    (
        "krea_ib_port_other_counters",
        "counter",
        "A file in counters/ or counters_ext/ this exporter has no name for, by file name.",
        (*_PORT, "counter"),
    ),
    (
        "krea_ib_hw_counters",
        "counter",
        "Driver hardware counter from ports/<port>/hw_counters/<counter>, as read.",
        (*_PORT, "counter"),
    ),
    (
        "krea_ib_hw_counters_lifespan_seconds",
        "gauge",
        "How long the driver caches hw_counters values (hw_counters/lifespan, ms / 1000).",
        _PORT,
    ),
    (
        "krea_ib_port_counters_saturated",
        "gauge",
        "1 if the PMA counter is stuck at its all-ones maximum (it saturates, it does not "
        "wrap: its rate reads as zero), else 0. Only counters of known width.",
        (*_PORT, "counter"),
    ),
    (
        "krea_ib_state_id",
        "gauge",
        "Port logical state (1: down, 2: init, 3: armed, 4: active, 5: active defer).",
        _PORT,
    ),
    (
        "krea_ib_physical_state_id",
        "gauge",
        "Port physical state (1: sleep, 2: polling, 3: disabled, 4: training, 5: link up, "
        "6: link error recovery, 7: phy test).",
        _PORT,
    ),
    (
        "krea_ib_rate_bytes_per_second",
        "gauge",
        "Port signalling rate: the Gb/s in the rate file times 125000000.",
        _PORT,
    ),
    (
        "krea_ib_port_info",
        "gauge",
        "Port text attributes as read from sysfs (state, phys_state, rate verbatim); value is 1.",
        (*_PORT, "link_layer", "state", "phys_state", "rate"),
    ),
    (
        "krea_ib_info",
        "gauge",
        "InfiniBand device attributes (empty label when the file is missing); value is 1.",
        ("node", "device", "board_id", "firmware_version", "hca_type", "node_guid"),
    ),
    (
        "krea_ib_read_errors",
        "counter",
        "Failed or unparsable reads of one sysfs file (path relative to class/infiniband), "
        "since the exporter started. That file's series is absent while it fails.",
        ("node", "file"),
    ),
)
_FAM_INDEX = {spec[0]: i for i, spec in enumerate(_FAMILIES)}
_SAMPLE_NAME = tuple(name + "_total" if typ == "counter" else name for name, typ, _, _ in _FAMILIES)
_F_OTHER = _FAM_INDEX["krea_ib_port_other_counters"]
_F_HW = _FAM_INDEX["krea_ib_hw_counters"]
_F_LIFESPAN = _FAM_INDEX["krea_ib_hw_counters_lifespan_seconds"]
_F_SATURATED = _FAM_INDEX["krea_ib_port_counters_saturated"]
_F_STATE = _FAM_INDEX["krea_ib_state_id"]
_F_PHYS = _FAM_INDEX["krea_ib_physical_state_id"]
_F_RATE = _FAM_INDEX["krea_ib_rate_bytes_per_second"]
_F_PORT_INFO = _FAM_INDEX["krea_ib_port_info"]
_F_INFO = _FAM_INDEX["krea_ib_info"]
_F_ERRORS = _FAM_INDEX["krea_ib_read_errors"]
_S_SATURATED = _SAMPLE_NAME[_F_SATURATED]

# ---------------------------------------------------------------------------------------
# Known counter files: name -> (family name, multiplier, width in bits or None if unknown).
# Widths from the kernel's core/sysfs.c PMA tables (IBA PortCounters/PortCountersExtended).

_W_DATA = -1  # 64 if counters/ has unicast_*/multicast_* (kernel saw CAP_EXT_WIDTH), else 32

_COUNTERS: dict[str, tuple[str, int, int | None]] = {
    "port_rcv_data": ("krea_ib_port_data_received_bytes", 4, _W_DATA),
    "port_xmit_data": ("krea_ib_port_data_transmitted_bytes", 4, _W_DATA),
    "port_rcv_packets": ("krea_ib_port_packets_received", 1, _W_DATA),
    "port_xmit_packets": ("krea_ib_port_packets_transmitted", 1, _W_DATA),
    "unicast_rcv_packets": ("krea_ib_unicast_packets_received", 1, 64),
    "unicast_xmit_packets": ("krea_ib_unicast_packets_transmitted", 1, 64),
    "multicast_rcv_packets": ("krea_ib_multicast_packets_received", 1, 64),
    "multicast_xmit_packets": ("krea_ib_multicast_packets_transmitted", 1, 64),
    "port_xmit_wait": ("krea_ib_port_transmit_wait", 1, 32),
    "symbol_error": ("krea_ib_symbol_error", 1, 16),
    "link_error_recovery": ("krea_ib_link_error_recovery", 1, 8),
    "link_downed": ("krea_ib_link_downed", 1, 8),
    "port_rcv_errors": ("krea_ib_port_errors_received", 1, 16),
    "port_rcv_remote_physical_errors": ("krea_ib_port_receive_remote_physical_errors", 1, 16),
    "port_rcv_switch_relay_errors": ("krea_ib_port_receive_switch_relay_errors", 1, 16),
    # Not a kernel PMA attribute (mlx4 OFED only): width unknown, no saturation series.
    "port_rcv_discards": ("krea_ib_port_discards_received", 1, None),
    "port_xmit_discards": ("krea_ib_port_discards_transmitted", 1, 16),
    "port_rcv_constraint_errors": ("krea_ib_port_constraint_errors_received", 1, 8),
    "port_xmit_constraint_errors": ("krea_ib_port_constraint_errors_transmitted", 1, 8),
    "local_link_integrity_errors": ("krea_ib_local_link_integrity_errors", 1, 4),
    "excessive_buffer_overrun_errors": ("krea_ib_excessive_buffer_overrun_errors", 1, 4),
    "VL15_dropped": ("krea_ib_vl15_dropped", 1, 16),
}
_COUNTERS_EXT: dict[str, tuple[str, int, int | None]] = {
    "port_rcv_data_64": ("krea_ib_port_data_received_bytes", 4, 64),
    "port_xmit_data_64": ("krea_ib_port_data_transmitted_bytes", 4, 64),
    "port_rcv_packets_64": ("krea_ib_port_packets_received", 1, 64),
    "port_xmit_packets_64": ("krea_ib_port_packets_transmitted", 1, 64),
    "port_unicast_rcv_packets": ("krea_ib_unicast_packets_received", 1, 64),
    "port_unicast_xmit_packets": ("krea_ib_unicast_packets_transmitted", 1, 64),
    "port_multicast_rcv_packets": ("krea_ib_multicast_packets_received", 1, 64),
    "port_multicast_xmit_packets": ("krea_ib_multicast_packets_transmitted", 1, 64),
}
_EXT_WIDTH_MARKERS = (
    "unicast_rcv_packets",
    "unicast_xmit_packets",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
)
_DEVICE_INFO = (
    ("board_id", "board_id"),
    ("firmware_version", "fw_ver"),
    ("hca_type", "hca_type"),
    ("node_guid", "node_guid"),
)

# ---------------------------------------------------------------------------------------
# Errno classes (see the module docstring).

_ABSENT = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENODATA})
_STALE = frozenset({errno.ENODEV, errno.ENXIO, errno.EBADF, errno.ESTALE})
# O_NONBLOCK: opening a FIFO planted in the tree must not hang the scrape.
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
_NUM_READ = 64  # a u64 is at most 20 digits
_TEXT_READ = 4096  # sysfs attributes are at most one page


class _Stale(Exception):
    """A cached descriptor or listed file went away: rediscover and read again."""


class _Errors:
    """Files that failed during one attempt at a scrape (committed only if it completes)."""

    __slots__ = ("files", "stale_is_error")

    def __init__(self, stale_is_error: bool) -> None:
        self.files: list[str] = []
        self.stale_is_error = stale_is_error


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def _port_sort_key(name: str) -> tuple[int, int, str]:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def _entry_names(path: str) -> list[str]:
    """Names in a directory, sorted; raises OSError (FileNotFoundError if missing)."""
    with os.scandir(path) as it:
        return sorted(e.name for e in it)


class _Plan:
    """What discovery found: open descriptors and everything precomputed for a scrape."""

    __slots__ = ("counters", "info_samples", "lifespans", "ports")

    def __init__(self) -> None:
        # (fd, path, errkey, family, sample_name, labels, multiplier, maxval,
        #  (saturated=0 sample, saturated=1 sample) or None, memo). Samples are immutable:
        #  the two saturation samples are built once, and memo = [raw, sample, saturation
        #  sample] of the last scrape lets an unchanged file reuse them without parsing.
        self.counters: list[tuple[Any, ...]] = []
        # (fd, path, errkey, labels)
        self.lifespans: list[tuple[Any, ...]] = []
        # (labels, link_layer, state_file, phys_state_file, rate_file); a file is
        # (fd, path, errkey)
        self.ports: list[tuple[Any, ...]] = []
        self.info_samples: list[Sample] = []


class InfinibandCollector:
    """InfiniBand port metrics of one node, read from ``<sysfs_root>/class/infiniband``."""

    name = "infiniband"

    def __init__(
        self,
        sysfs_root: str | os.PathLike[str],
        node: str = "",
        *,
        rediscover_s: float = 60.0,
        max_open_files: int | None = None,
    ) -> None:
        root = os.fspath(sysfs_root)
        if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
            raise BadInput(f"sysfs root {root!r} is not an existing readable directory")
        if not (rediscover_s >= 0 and math.isfinite(rediscover_s)):
            raise BadInput(f"rediscover_s must be 0 or more seconds, got {rediscover_s!r}")
        if max_open_files is None:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            max_open_files = 65536 if soft == resource.RLIM_INFINITY else soft // 2
        self._root = root
        self._ib_dir = os.path.join(root, "class", "infiniband")
        self._node = node
        self._rediscover_s = float(rediscover_s)
        self._max_fds = max(0, int(max_open_files))
        self._lock = threading.Lock()
        self._plan: _Plan | None = None
        self._next_discovery = 0.0
        self._fds: list[int] = []  # mutated in place: the finalizer holds this list
        self._errors: dict[str, int] = {}
        self._error_labels: dict[str, dict[str, str]] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    # -- prometheus_client collector protocol ------------------------------------------

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = self._scrape()
        return iter(families)

    def close(self) -> None:
        """Close the cached descriptors. A later collect() discovers the tree again."""
        with self._lock:
            _close_all(self._fds)
            self._plan = None

    # -- discovery -----------------------------------------------------------------------

    def _rediscover(self, errs: _Errors) -> _Plan:
        _close_all(self._fds)
        self._plan = None
        plan = _Plan()
        try:
            devices = _entry_names(self._ib_dir)
        except FileNotFoundError:
            devices = []  # no InfiniBand on this node: not an error
        except OSError:
            errs.files.append(".")
            devices = []
        for device in devices:
            dev_dir = os.path.join(self._ib_dir, device)
            if not os.path.isdir(dev_dir):
                continue
            self._discover_device(plan, device, dev_dir, errs)
        self._plan = plan
        self._next_discovery = time.monotonic() + self._rediscover_s
        return plan

    def _open(self, path: str) -> int:
        """A cached descriptor for path, or -1 to open it at every scrape."""
        if len(self._fds) >= self._max_fds:
            return -1
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError:
            return -1  # retried (and classified) at every scrape
        self._fds.append(fd)
        return fd

    def _read_static(self, path: str, errkey: str, errs: _Errors, required: bool) -> str:
        """Text of a file read once per discovery; "" if absent or unreadable."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            if required or os.path.lexists(path):
                errs.files.append(errkey)
            return ""
        except OSError as exc:
            if exc.errno not in _ABSENT:
                errs.files.append(errkey)
            return ""
        try:
            raw = os.pread(fd, _TEXT_READ, 0)
        except OSError as exc:
            if exc.errno not in _ABSENT:
                errs.files.append(errkey)
            return ""
        finally:
            os.close(fd)
        return raw.decode("utf-8", "replace").strip()

    def _discover_device(self, plan: _Plan, device: str, dev_dir: str, errs: _Errors) -> None:
        node = self._node
        info = {"node": node, "device": device}
        for label, fname in _DEVICE_INFO:
            info[label] = self._read_static(
                os.path.join(dev_dir, fname), f"{device}/{fname}", errs, required=False
            )
        plan.info_samples.append(Sample(_SAMPLE_NAME[_F_INFO], info, 1.0))
        ports_dir = os.path.join(dev_dir, "ports")
        try:
            ports = sorted(_entry_names(ports_dir), key=_port_sort_key)
        except FileNotFoundError:
            return
        except OSError:
            errs.files.append(f"{device}/ports")
            return
        for port in ports:
            port_dir = os.path.join(ports_dir, port)
            if os.path.isdir(port_dir):
                self._discover_port(plan, device, port, port_dir, errs)

    def _discover_port(
        self, plan: _Plan, device: str, port: str, port_dir: str, errs: _Errors
    ) -> None:
        labels = {"node": self._node, "device": device, "port": port}
        prefix = f"{device}/ports/{port}/"
        link_layer = self._read_static(
            os.path.join(port_dir, "link_layer"), prefix + "link_layer", errs, required=True
        )
        files = []
        for fname in ("state", "phys_state", "rate"):
            path = os.path.join(port_dir, fname)
            files.append((self._open(path), path, prefix + fname))
        plan.ports.append((labels, link_layer, *files))

        listed: dict[str, list[str]] = {}
        for sub in ("counters", "counters_ext", "hw_counters"):
            try:
                listed[sub] = _entry_names(os.path.join(port_dir, sub))
            except FileNotFoundError:
                listed[sub] = []
            except OSError:
                errs.files.append(prefix + sub)
                listed[sub] = []

        # family -> (subdir, file, multiplier, width); counters_ext overrides counters/.
        chosen: dict[str, tuple[str, str, int, int | None]] = {}
        others: list[tuple[str, str]] = []
        ext_width = any(m in listed["counters"] for m in _EXT_WIDTH_MARKERS)
        for fname in listed["counters"]:
            known = _COUNTERS.get(fname)
            if known is None:
                others.append(("counters", fname))
                continue
            family, mult, width = known
            if width == _W_DATA:
                width = 64 if ext_width else 32
            chosen[family] = ("counters", fname, mult, width)
        for fname in listed["counters_ext"]:
            known = _COUNTERS_EXT.get(fname)
            if known is None:
                others.append(("counters_ext", fname))
                continue
            family, mult, width = known
            if family in chosen and not self._ext_usable(
                os.path.join(port_dir, "counters_ext", fname)
            ):
                continue  # the 64-bit file says "not supported": keep the 32-bit one
            chosen[family] = ("counters_ext", fname, mult, width)

        for family, (sub, fname, mult, width) in sorted(chosen.items()):
            path = os.path.join(port_dir, sub, fname)
            maxval = (1 << width) - 1 if width else 0
            sat = None
            if maxval:
                sat_labels = {**labels, "counter": fname}
                sat = (Sample(_S_SATURATED, sat_labels, 0.0), Sample(_S_SATURATED, sat_labels, 1.0))
            self._add_counter(
                plan, path, f"{prefix}{sub}/{fname}", _FAM_INDEX[family], labels, mult, maxval, sat
            )
        seen: set[str] = set()
        for sub, fname in others:
            counter = fname if fname not in seen else f"{sub}/{fname}"
            seen.add(counter)
            path = os.path.join(port_dir, sub, fname)
            self._add_counter(
                plan,
                path,
                f"{prefix}{sub}/{fname}",
                _F_OTHER,
                {**labels, "counter": counter},
                1,
                0,
                None,
            )
        for fname in listed["hw_counters"]:
            path = os.path.join(port_dir, "hw_counters", fname)
            errkey = f"{prefix}hw_counters/{fname}"
            if fname == "lifespan":
                plan.lifespans.append((self._open(path), path, errkey, labels))
            else:
                self._add_counter(
                    plan, path, errkey, _F_HW, {**labels, "counter": fname}, 1, 0, None
                )

    def _add_counter(
        self,
        plan: _Plan,
        path: str,
        errkey: str,
        fam: int,
        labels: dict[str, str],
        mult: int,
        maxval: int,
        sat: tuple[Sample, Sample] | None,
    ) -> None:
        memo: list[Any] = [None, None, None]  # last raw bytes, its sample, its saturation
        plan.counters.append(
            (
                self._open(path),
                path,
                errkey,
                fam,
                _SAMPLE_NAME[fam],
                labels,
                mult,
                maxval,
                sat,
                memo,
            )
        )

    @staticmethod
    def _ext_usable(path: str) -> bool:
        """False if a counters_ext file answers N/A or a not-supported errno right now."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            return exc.errno not in _ABSENT
        try:
            raw = os.pread(fd, _NUM_READ, 0)
        except OSError as exc:
            return exc.errno not in _ABSENT
        finally:
            os.close(fd)
        return b"N/A" not in raw

    # -- reading -------------------------------------------------------------------------

    def _failed(
        self, exc: OSError, fd: int, path: str, errkey: str, errs: _Errors, required: bool = False
    ) -> None:
        """Classify a failed read: absent (nothing), stale (raise _Stale) or an error."""
        code = exc.errno
        if code in _ABSENT:
            return
        stale = code in _STALE
        if code == errno.ENOENT:
            if not os.path.isdir(os.path.dirname(path)):
                stale = True  # the port (or device) went away
            elif fd >= 0 or not (required or os.path.lexists(path)):
                stale = True  # the file itself went away
        if not stale:
            errs.files.append(errkey)
        elif not errs.stale_is_error:
            raise _Stale
        elif fd >= 0 or code != errno.ENOENT:
            # Still failing right after a rediscovery: an error. (A file that vanished
            # again between discovery and this read is just gone.)
            errs.files.append(errkey)

    def _read_text(
        self, fd: int, path: str, errkey: str, errs: _Errors, required: bool = False
    ) -> bytes | None:
        try:
            if fd >= 0:
                return os.pread(fd, _TEXT_READ, 0)
            tmp = os.open(path, _OPEN_FLAGS)
            try:
                return os.pread(tmp, _TEXT_READ, 0)
            finally:
                os.close(tmp)
        except OSError as exc:
            self._failed(exc, fd, path, errkey, errs, required)
            return None

    def _read_all(self, plan: _Plan, errs: _Errors) -> list[list[Sample]]:
        """One pass over the plan: a list of samples per family. Raises _Stale."""
        out: list[list[Sample]] = [[] for _ in _FAMILIES]
        saturated = out[_F_SATURATED]
        pread = os.pread
        for fd, path, errkey, fam, sname, labels, mult, maxval, sat, memo in plan.counters:
            try:
                if fd >= 0:
                    raw = pread(fd, _NUM_READ, 0)
                else:
                    tmp = os.open(path, _OPEN_FLAGS)
                    try:
                        raw = pread(tmp, _NUM_READ, 0)
                    finally:
                        os.close(tmp)
            except OSError as exc:
                self._failed(exc, fd, path, errkey, errs)
                continue
            if raw == memo[0]:  # unchanged since the last scrape: reuse its samples
                out[fam].append(memo[1])
                if maxval:
                    saturated.append(memo[2])
                continue
            try:
                value = int(raw)
            except ValueError:
                if b"N/A" not in raw:
                    errs.files.append(errkey)
                continue
            if value < 0:
                errs.files.append(errkey)
                continue
            sample = Sample(sname, labels, float(value * mult))
            out[fam].append(sample)
            memo[0] = raw
            memo[1] = sample
            if maxval:
                memo[2] = sat[value == maxval]
                saturated.append(memo[2])

        for fd, path, errkey, labels in plan.lifespans:
            text = self._read_text(fd, path, errkey, errs)
            if text is None or b"N/A" in text:
                continue
            try:
                ms = int(text)
            except ValueError:
                ms = -1
            if ms < 0:
                errs.files.append(errkey)
                continue
            out[_F_LIFESPAN].append(Sample(_SAMPLE_NAME[_F_LIFESPAN], labels, ms / 1000))

        for labels, link_layer, *files in plan.ports:
            texts = []
            for (fd, path, errkey), fam in zip(files, (_F_STATE, _F_PHYS, _F_RATE), strict=True):
                content = self._read_text(fd, path, errkey, errs, required=True)
                if content is None:
                    texts.append("")
                    continue
                value_text = content.decode("utf-8", "replace").strip()
                texts.append(value_text)
                if "N/A" in value_text:
                    continue
                number = self._parse_port_value(fam, value_text)
                if number is None:
                    errs.files.append(errkey)
                else:
                    out[fam].append(Sample(_SAMPLE_NAME[fam], labels, number))
            out[_F_PORT_INFO].append(
                Sample(
                    _SAMPLE_NAME[_F_PORT_INFO],
                    {
                        **labels,
                        "link_layer": link_layer,
                        "state": texts[0],
                        "phys_state": texts[1],
                        "rate": texts[2],
                    },
                    1.0,
                )
            )
        out[_F_INFO].extend(plan.info_samples)
        return out

    @staticmethod
    def _parse_port_value(fam: int, text: str) -> float | None:
        """``"4: ACTIVE"`` -> 4.0; ``"100 Gb/sec (4X EDR)"`` -> 1.25e10; None if garbage."""
        try:
            if fam == _F_RATE:
                rate = float(text.split(None, 1)[0]) * 125_000_000  # "1e308" overflows to inf
                return rate if math.isfinite(rate) and rate >= 0 else None
            number = int(text.split(":", 1)[0])
            return float(number) if number >= 0 else None
        except (ValueError, IndexError):
            return None

    def _scrape(self) -> list[Metric]:
        errs = _Errors(stale_is_error=False)
        plan = self._plan
        if plan is None or time.monotonic() >= self._next_discovery:
            plan = self._rediscover(errs)
        try:
            out = self._read_all(plan, errs)
        except _Stale:
            # Something went away under a cached descriptor: rediscover and read once more;
            # anything still failing now is an error.
            errs = _Errors(stale_is_error=True)
            plan = self._rediscover(errs)
            out = self._read_all(plan, errs)

        counts = self._errors
        for errkey in errs.files:
            counts[errkey] = counts.get(errkey, 0) + 1
            if errkey not in self._error_labels:
                self._error_labels[errkey] = {"node": self._node, "file": errkey}
        name = _SAMPLE_NAME[_F_ERRORS]
        out[_F_ERRORS] = [Sample(name, self._error_labels[k], float(v)) for k, v in counts.items()]

        families: list[Metric] = []
        for (fname, typ, doc, labelnames), samples in zip(_FAMILIES, out, strict=True):
            if not samples:
                continue
            metric: Metric
            if typ == "counter":
                metric = CounterMetricFamily(fname, doc, labels=labelnames)
            else:
                metric = GaugeMetricFamily(fname, doc, labels=labelnames)
            metric.samples = samples
            families.append(metric)
        return families


def counter_metric(counter: str) -> str:
    """The sample name this exporter serves a PMA counter (sysfs file name) under:
    ``symbol_error`` -> ``krea_ib_symbol_error_total``."""
    return _COUNTERS[counter][0] + "_total"
