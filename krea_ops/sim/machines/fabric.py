"""Simulated InfiniBand HCAs: a sysfs ``class/infiniband`` tree written as real files.

Each node gets ``hcas_per_node`` ConnectX-7 HCAs (``mlx5_0`` ...), each with one port, laid
out like the kernel's tree (and the procfs fixture's ``mlx5_0``): device files
``node_guid``, ``hca_type`` (MT4129), ``fw_ver``, ``board_id``; per port ``state``
(``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``rate`` (``400 Gb/sec (4X NDR)``),
``link_layer`` (``InfiniBand``), ``counters/`` (the 21 PMA counters; the data counters
count 4-byte words and are 64-bit because ``unicast_*``/``multicast_*`` exist) and
``hw_counters/`` (mlx5 names plus ``lifespan``).

Files are rewritten **in place** (one ``pwrite`` at offset 0, then ``ftruncate``), never
replaced by rename and never truncated first: the exporter keeps them open and re-reads
with ``pread`` at offset 0, as it does on real sysfs. Counters only grow, so a new value is
never shorter than the old one; PMA counters saturate at their all-ones maximum
(``port_xmit_wait`` is 32-bit, the error counters 16/8/4-bit) instead of wrapping.

A tree left by an earlier run in the same state directory is continued: counters start
from the values already in the files, so they stay monotonic across restarts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path

__all__ = ["COUNTER_WIDTHS", "IbPort", "IbTree"]

HCA_TYPE = "MT4129"  # ConnectX-7
FW_VER = "28.39.1002"
BOARD_ID = "MT_0000000838"
RATE = "400 Gb/sec (4X NDR)"
LINK_LAYER = "InfiniBand"
STATE_UP, STATE_DOWN = "4: ACTIVE", "1: DOWN"
PHYS_UP, PHYS_DOWN = "5: LinkUp", "3: Disabled"
NDR_BYTES_PER_S = 400e9 / 8

# counters/ file -> width in bits (kernel core/sysfs.c; the data/packet counters are
# 64-bit on an HCA that advertises CAP_EXT_WIDTH, which every ConnectX-7 does).
COUNTER_WIDTHS: dict[str, int] = {
    "VL15_dropped": 16,
    "excessive_buffer_overrun_errors": 4,
    "link_downed": 8,
    "link_error_recovery": 8,
    "local_link_integrity_errors": 4,
    "multicast_rcv_packets": 64,
    "multicast_xmit_packets": 64,
    "port_rcv_constraint_errors": 8,
    "port_rcv_data": 64,
    "port_rcv_errors": 16,
    "port_rcv_packets": 64,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_constraint_errors": 8,
    "port_xmit_data": 64,
    "port_xmit_discards": 16,
    "port_xmit_packets": 64,
    "port_xmit_wait": 32,
    "symbol_error": 16,
    "unicast_rcv_packets": 64,
    "unicast_xmit_packets": 64,
}
HW_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_read_requests",
    "rx_write_requests",
)
_HW_WIDTH = 64


def _stable(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class _File:
    """One sysfs attribute, rewritten in place. Keeps its descriptor if allowed to."""

    __slots__ = ("fd", "keep", "path", "size", "text")

    def __init__(self, path: Path, text: str, keep: bool) -> None:
        self.path = str(path)
        self.keep = keep
        self.fd = -1
        self.text = ""
        self.size = -1  # unknown: truncate after the first write
        self.write(text)

    def write(self, text: str) -> None:
        if text == self.text:
            return
        data = (text + "\n").encode()
        fd = self.fd
        if fd < 0:
            flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
            if self.size < 0:
                flags |= os.O_TRUNC  # the first write: whatever was there goes
            fd = os.open(self.path, flags, 0o644)
        try:
            os.pwrite(fd, data, 0)
            if 0 <= len(data) < self.size:
                # Shorter than before: cut the old tail. (A counter never gets shorter.)
                os.ftruncate(fd, len(data))
            self.size = len(data)
        finally:
            if self.keep:
                self.fd = fd
            else:
                os.close(fd)
        self.text = text

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def _existing_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _nothing(_path: Path) -> int | None:
    return None


class IbPort:
    """Port 1 of one HCA: its counters as exact integers, its link state, its files.

    ``add(name, amount)`` accumulates fractional amounts and saturates at the counter's
    width; ``flush()`` writes the files whose integer value changed.
    """

    def __init__(
        self, device: str, port_dir: Path, seed_key: str, keep_fds: set[str], fresh_base: bool
    ) -> None:
        self.device = device
        self.port = "1"
        self.dir = port_dir
        self.up = True
        self._acc: dict[str, float] = {}
        self._max: dict[str, int] = {}
        self._files: dict[str, _File] = {}
        counters_dir = port_dir / "counters"
        hw_dir = port_dir / "hw_counters"
        counters_dir.mkdir(parents=True, exist_ok=True)
        hw_dir.mkdir(parents=True, exist_ok=True)
        h = _stable(seed_key)
        # A node that has been up for days: large data counters, a little background noise.
        words = (h % 4_000_000_000_000) + 500_000_000_000 if fresh_base else 0
        base = {
            "port_rcv_data": words,
            "port_xmit_data": words + (h >> 20) % 50_000_000_000,
            "port_rcv_packets": words // 1024,
            "port_xmit_packets": words // 1024,
            "unicast_rcv_packets": words // 1024,
            "unicast_xmit_packets": words // 1024,
            "multicast_rcv_packets": (h >> 8) % 50_000 if fresh_base else 0,
            "multicast_xmit_packets": (h >> 12) % 5_000 if fresh_base else 0,
            "port_xmit_wait": (h >> 16) % 80_000_000 if fresh_base else 0,
            "port_rcv_switch_relay_errors": 0,
        }
        # A tree written before (the world restarted on its state) keeps its counts; a
        # new one has nothing to read (64 nodes: 23,000 failed opens saved at start-up).
        existing = _existing_int if not fresh_base else _nothing
        for name, width in COUNTER_WIDTHS.items():
            path = counters_dir / name
            value = existing(path)
            self._acc[name] = float(value if value is not None else base.get(name, 0))
            self._max[name] = (1 << width) - 1
            self._files[name] = _File(path, str(int(self._acc[name])), name in keep_fds)
        for name in HW_COUNTERS:
            key = "hw:" + name
            path = hw_dir / name
            value = existing(path)
            self._acc[key] = float(value if value is not None else 0)
            self._max[key] = (1 << _HW_WIDTH) - 1
            self._files[key] = _File(path, str(int(self._acc[key])), key in keep_fds)
        _File(hw_dir / "lifespan", "10", False)
        _File(port_dir / "rate", RATE, False)
        _File(port_dir / "link_layer", LINK_LAYER, False)
        self._files["state"] = _File(port_dir / "state", STATE_UP, "state" in keep_fds)
        self._files["phys_state"] = _File(
            port_dir / "phys_state", PHYS_UP, "phys_state" in keep_fds
        )
        self._dirty: set[str] = set()

    def value(self, name: str) -> int:
        """A counter's current integer value (``hw:NAME`` for hw_counters)."""
        return int(self._acc[name])

    def add(self, name: str, amount: float) -> None:
        if amount <= 0:
            return
        old = self._acc[name]
        top = self._max[name]
        new = min(old + amount, float(top))
        self._acc[name] = new
        if int(new) != int(old):
            self._dirty.add(name)

    def set_link(self, up: bool) -> None:
        """Bring the link up (ACTIVE/LinkUp) or down (DOWN/Disabled), writing at once."""
        self.up = up
        self._files["state"].write(STATE_UP if up else STATE_DOWN)
        self._files["phys_state"].write(PHYS_UP if up else PHYS_DOWN)

    def flush(self) -> int:
        """Write every counter whose integer value changed; returns how many files."""
        dirty = self._dirty
        if not dirty:
            return 0
        files, acc, top = self._files, self._acc, self._max
        for name in dirty:
            files[name].write(str(min(int(acc[name]), top[name])))
        n = len(dirty)
        dirty.clear()
        return n

    def close(self) -> None:
        for f in self._files.values():
            f.close()


# Counters that change on most ticks: worth a cached descriptor when the budget allows.
HOT_FILES = frozenset(
    {
        "port_rcv_data",
        "port_xmit_data",
        "port_rcv_packets",
        "port_xmit_packets",
        "unicast_rcv_packets",
        "unicast_xmit_packets",
        "port_xmit_wait",
        "hw:rx_read_requests",
        "hw:rx_write_requests",
    }
)


class IbTree:
    """The ``<root>/class/infiniband`` tree of one node."""

    def __init__(self, root: Path, node: str, hcas: int, seed: int, keep_fds: bool) -> None:
        self.root = root
        self.node = node
        self.lock = threading.RLock()
        ib_dir = root / "class" / "infiniband"
        ib_dir.mkdir(parents=True, exist_ok=True)
        fresh = not any(ib_dir.iterdir())
        self.ports: list[IbPort] = []
        keep = set(HOT_FILES) if keep_fds else set()
        for i in range(hcas):
            device = f"mlx5_{i}"
            dev_dir = ib_dir / device
            (dev_dir / "ports").mkdir(parents=True, exist_ok=True)
            guid = _stable(f"{seed}:{node}:{device}:guid")
            text = f"{guid:016x}"
            _File(dev_dir / "node_guid", ":".join(text[j : j + 4] for j in (0, 4, 8, 12)), False)
            _File(dev_dir / "hca_type", HCA_TYPE, False)
            _File(dev_dir / "fw_ver", FW_VER, False)
            _File(dev_dir / "board_id", BOARD_ID, False)
            self.ports.append(
                IbPort(device, dev_dir / "ports" / "1", f"{seed}:{node}:{device}", keep, fresh)
            )

    def flush(self) -> int:
        with self.lock:
            return sum(p.flush() for p in self.ports)

    def close(self) -> None:
        with self.lock:
            for p in self.ports:
                p.close()
