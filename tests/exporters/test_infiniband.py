"""InfinibandCollector against node_exporter's own fixtures and outputs, and broken trees."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.errors import BadInput
from krea_ops.exporters.infiniband import InfinibandCollector
from tests.conftest import IB_FIXTURE, NODE_EXPORTER_TREE, PROCFS_TREE, require_binary

Key = tuple[str, tuple[tuple[str, str], ...]]

# node_exporter's separate families for counters_ext -> the family we export them in.
LEGACY = {
    f"node_infiniband_legacy_{theirs}_total": f"krea_ib_{ours}_total"
    for theirs, ours in {
        "data_received_bytes": "port_data_received_bytes",
        "data_transmitted_bytes": "port_data_transmitted_bytes",
        "packets_received": "port_packets_received",
        "packets_transmitted": "port_packets_transmitted",
        "unicast_packets_received": "unicast_packets_received",
        "unicast_packets_transmitted": "unicast_packets_transmitted",
        "multicast_packets_received": "multicast_packets_received",
        "multicast_packets_transmitted": "multicast_packets_transmitted",
    }.items()
}
ERRORS = "krea_ib_read_errors_total"
SATURATED = "krea_ib_port_counters_saturated"


class Scrape:
    """One collect(), as {(sample name, sorted labels): value} plus the family types."""

    def __init__(self, collector: InfinibandCollector) -> None:
        self.samples: dict[Key, float] = {}
        self.types: dict[str, str] = {}
        for family in collector.collect():
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert key not in self.samples, f"duplicate series {key}"
                self.samples[key] = s.value
                self.types[s.name] = family.type

    def find(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [
            (dict(ls), v)
            for (n, ls), v in self.samples.items()
            if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
        ]

    def one(self, name: str, **labels: str) -> float:
        hits = self.find(name, **labels)
        assert len(hits) == 1, (name, labels, hits)
        return hits[0][1]

    def get(self, name: str, **labels: str) -> float | None:
        hits = self.find(name, **labels)
        assert len(hits) <= 1, (name, labels, hits)
        return hits[0][1] if hits else None

    def errors(self) -> dict[str, float]:
        return {labels["file"]: v for labels, v in self.find(ERRORS)}


def scrape(root: Path | str, **kwargs: object) -> Scrape:
    collector = InfinibandCollector(root, "n1", **kwargs)  # type: ignore[arg-type]
    try:
        return Scrape(collector)
    finally:
        collector.close()


def node_exporter_samples(prom_file: Path) -> list[tuple[str, dict[str, str], float]]:
    text = prom_file.read_text()
    return [
        (s.name, dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def exposition(collector: InfinibandCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the procfs fixture (hfi1_0, mlx4_0, mlx5_0 with hw_counters)."""
    root = tmp_path / "sys"
    shutil.copytree(PROCFS_TREE, root)
    return root


def port_dir(root: Path, device: str, port: str = "1") -> Path:
    return root / "class" / "infiniband" / device / "ports" / port


def rewrite(path: Path, text: str) -> None:
    """Rewrite in place (same inode), as sysfs and the simulator do."""
    with open(path, "r+") as f:
        f.truncate(0)
        f.write(text)


# ---------------------------------------------------------------------------------------
# Same numbers as node_exporter


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        (NODE_EXPORTER_TREE, IB_FIXTURE / "node_exporter-expected.prom"),
        (PROCFS_TREE, IB_FIXTURE / "procfs-v0.21.1" / "node_exporter-1.5.0-debian-output.prom"),
    ],
    ids=["node_exporter-fixture", "procfs-fixture"],
)
def test_every_node_exporter_series_has_ours_with_the_same_value(
    root: Path, expected: Path
) -> None:
    ours = scrape(root)
    theirs = node_exporter_samples(expected)
    assert len(theirs) > 40
    legacy = {
        (LEGACY[n], labels["device"], labels["port"]): v for n, labels, v in theirs if n in LEGACY
    }

    matched: set[Key] = set()
    for name, labels, value in theirs:
        our_name = LEGACY.get(name, name.replace("node_infiniband_", "krea_ib_"))
        hits = ours.find(our_name, node="n1", **labels)
        assert len(hits) == 1, f"no krea_ib series for {name}{labels}: {hits}"
        our_labels, our_value = hits[0]
        if "port" in labels:
            # Where counters_ext has the 64-bit value, that is the one we export (node_exporter
            # shows it as legacy_*; its non-legacy series then holds the 32-bit file).
            value = legacy.get((our_name, labels["device"], labels["port"]), value)
        assert our_value == value, f"{our_name}{our_labels} = {our_value}, expected {value}"
        matched.add((our_name, tuple(sorted(our_labels.items()))))

    # ... and the reverse: for the families node_exporter has, we add no series of our own.
    ne_families = {LEGACY.get(n, n.replace("node_infiniband_", "krea_ib_")) for n, _, _ in theirs}
    extra = {k for k in ours.samples if k[0] in ne_families} - matched
    assert not extra
    assert not any(n.startswith("krea_ib_legacy") for n, _ in ours.samples)
    assert ours.errors() == {}


def test_i40iw_without_pma_has_state_and_info_but_no_counters_and_no_errors() -> None:
    ours = scrape(NODE_EXPORTER_TREE)
    i40iw = [(n, ls) for (n, ls) in ours.samples if ("device", "i40iw0") in ls]
    counters = [n for n, _ in i40iw if ours.types[n] == "counter"]
    assert counters == []
    assert ours.find(SATURATED, device="i40iw0") == []
    assert ours.one("krea_ib_state_id", device="i40iw0", port="1") == 4
    assert ours.one("krea_ib_rate_bytes_per_second", device="i40iw0", port="1") == 10 * 125e6
    assert ours.errors() == {}


def test_counters_ext_is_preferred_over_the_32_bit_file() -> None:
    ours = scrape(NODE_EXPORTER_TREE)
    # mlx4_0 port 2: counters/port_rcv_data is 0, counters_ext/port_rcv_data_64 is 4631917.
    assert (
        ours.one("krea_ib_port_data_received_bytes_total", device="mlx4_0", port="2") == 4631917 * 4
    )
    assert ours.one("krea_ib_unicast_packets_received_total", device="mlx4_0", port="2") == 61148
    # mlx4_0 port 1: counters/port_rcv_packets is 6825908347, counters_ext says 0.
    assert ours.one("krea_ib_port_packets_received_total", device="mlx4_0", port="1") == 0


def test_mlx4_port_xmit_wait_at_all_ones_is_reported_saturated() -> None:
    ours = scrape(NODE_EXPORTER_TREE)
    assert ours.one("krea_ib_port_transmit_wait_total", device="mlx4_0", port="1") == 2**32 - 1
    assert ours.one(SATURATED, device="mlx4_0", port="1", counter="port_xmit_wait") == 1
    saturated = {
        (ls["device"], ls["port"], ls["counter"]) for ls, v in ours.find(SATURATED) if v == 1
    }
    assert saturated == {("mlx4_0", "1", "port_xmit_wait")}
    # 64-bit sources are labelled with their own file name.
    assert ours.one(SATURATED, device="mlx4_0", port="2", counter="port_rcv_data_64") == 0


@pytest.mark.parametrize(
    ("device", "fname", "value", "saturated"),
    [
        ("mlx5_0", "symbol_error", 65535, 1),  # 16-bit
        ("mlx5_0", "symbol_error", 65534, 0),
        ("mlx5_0", "link_downed", 255, 1),  # 8-bit
        ("mlx5_0", "local_link_integrity_errors", 15, 1),  # 4-bit
        ("mlx5_0", "excessive_buffer_overrun_errors", 15, 1),  # 4-bit
        ("mlx5_0", "port_xmit_wait", 2**32 - 1, 1),  # always 32-bit
        # mlx4_0 in this tree has no unicast_*/multicast_* files: 32-bit data counters...
        ("mlx4_0", "port_xmit_data", 2**32 - 1, 1),
        # ... mlx5_0 has them (CAP_EXT_WIDTH), so its data counters are 64-bit.
        ("mlx5_0", "port_xmit_data", 2**32 - 1, 0),
        ("mlx5_0", "port_xmit_data", 2**64 - 1, 1),
        ("mlx5_0", "unicast_rcv_packets", 2**64 - 1, 1),
    ],
)
def test_saturation_uses_each_counters_width(
    tree: Path, device: str, fname: str, value: int, saturated: int
) -> None:
    rewrite(port_dir(tree, device) / "counters" / fname, f"{value}\n")
    ours = scrape(tree)
    assert ours.one(SATURATED, device=device, port="1", counter=fname) == saturated


def test_hw_counters_are_exported_generically_with_lifespan_in_float_seconds() -> None:
    ours = scrape(PROCFS_TREE)
    hw_dir = port_dir(PROCFS_TREE, "mlx5_0") / "hw_counters"
    names = sorted(p.name for p in hw_dir.iterdir() if p.name != "lifespan")
    assert len(names) == 24
    got = {
        ls["counter"]: v
        for ls, v in ours.find("krea_ib_hw_counters_total", device="mlx5_0", port="1")
    }
    assert got == {n: float(int((hw_dir / n).read_text())) for n in names}
    assert got["local_ack_timeout_err"] == 131
    assert ours.types["krea_ib_hw_counters_total"] == "counter"
    # 10 ms; node_exporter's integer division would say 0.
    assert ours.one("krea_ib_hw_counters_lifespan_seconds", device="mlx5_0", port="1") == 0.01
    assert ours.find("krea_ib_hw_counters_total", device="mlx4_0") == []


def test_info_and_port_info_carry_the_text_attributes() -> None:
    ours = scrape(PROCFS_TREE)
    [(info, value)] = ours.find("krea_ib_info", device="mlx5_0")
    assert value == 1
    assert info == {
        "node": "n1",
        "device": "mlx5_0",
        "board_id": "SM_2001000001034",
        "firmware_version": "14.28.2006",
        "hca_type": "MT4118",
        "node_guid": "0a7f:bc12:45ef:d23b",
    }
    [(port, _)] = ours.find("krea_ib_port_info", device="hfi1_0", port="1")
    assert port == {
        "node": "n1",
        "device": "hfi1_0",
        "port": "1",
        "link_layer": "InfiniBand",
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "100 Gb/sec (4X EDR)",
    }
    assert ours.one("krea_ib_rate_bytes_per_second", device="hfi1_0") == 12.5e9


@pytest.mark.parametrize(
    ("rate", "bytes_per_s"),
    [
        ("2.5 Gb/sec (1X SDR)", 312_500_000),
        ("100 Gb/sec (4X EDR)", 12.5e9),
        ("400 Gb/sec (4X NDR)", 50e9),
        ("14.0625 Gb/sec (1X FDR)", 14.0625 * 125e6),
    ],
)
def test_rate_first_number_in_gbps_to_bytes(tree: Path, rate: str, bytes_per_s: float) -> None:
    rewrite(port_dir(tree, "mlx5_0") / "rate", rate + "\n")
    ours = scrape(tree)
    assert ours.one("krea_ib_rate_bytes_per_second", device="mlx5_0") == bytes_per_s
    assert ours.find("krea_ib_port_info", device="mlx5_0")[0][0]["rate"] == rate


def test_missing_fw_ver_is_an_empty_label_not_an_error(tree: Path) -> None:
    (tree / "class/infiniband/mlx4_0/fw_ver").unlink()
    ours = scrape(tree)
    [(info, _)] = ours.find("krea_ib_info", device="mlx4_0")
    assert info["firmware_version"] == "" and info["board_id"] == "SM_1141000001000"
    assert ours.one("krea_ib_state_id", device="mlx4_0", port="1") == 4
    assert ours.errors() == {}


def test_unknown_counter_files_become_other_counters(tree: Path) -> None:
    counters = port_dir(tree, "mlx5_0") / "counters"
    (counters / "port_rcv_new_thing").write_text("7\n")
    ext = port_dir(tree, "mlx5_0") / "counters_ext"
    ext.mkdir()
    (ext / "port_fancy_64").write_text("9\n")
    ours = scrape(tree)
    assert (
        ours.one("krea_ib_port_other_counters_total", device="mlx5_0", counter="port_rcv_new_thing")
        == 7
    )
    assert (
        ours.one("krea_ib_port_other_counters_total", device="mlx5_0", counter="port_fancy_64") == 9
    )
    assert ours.find(SATURATED, counter="port_rcv_new_thing") == []


def test_counters_ext_that_says_na_falls_back_to_the_32_bit_file(tree: Path) -> None:
    ext = port_dir(tree, "mlx5_0") / "counters_ext"
    ext.mkdir()
    (ext / "port_rcv_data_64").write_text("N/A (no PMA)\n")
    (ext / "port_xmit_data_64").write_text("1000\n")
    ours = scrape(tree)
    assert ours.one("krea_ib_port_data_received_bytes_total", device="mlx5_0") == 18126345378 * 4
    assert ours.one("krea_ib_port_data_transmitted_bytes_total", device="mlx5_0") == 4000
    assert ours.errors() == {}


# ---------------------------------------------------------------------------------------
# Broken trees: one bad file costs one series and one read error, never the scrape


def test_broken_files_cost_only_their_own_series_and_count_as_read_errors(tree: Path) -> None:
    clean = scrape(tree)
    mlx5 = port_dir(tree, "mlx5_0")
    (mlx5 / "counters/symbol_error").write_text("garbage\n")
    (mlx5 / "counters/port_xmit_wait").unlink()
    (mlx5 / "counters/port_xmit_wait").mkdir()  # a directory where a file should be
    (mlx5 / "hw_counters/out_of_buffer").write_text("-5\n")
    (port_dir(tree, "mlx4_0", "1") / "rate").unlink()
    dangling = port_dir(tree, "mlx4_0", "2") / "counters/link_downed"
    dangling.unlink()
    dangling.symlink_to("/nonexistent/link_downed")
    (tree / "class/infiniband/mlx5_0/board_id").unlink()
    (tree / "class/infiniband/mlx5_0/board_id").mkdir()
    broken = {
        "mlx5_0/ports/1/counters/symbol_error",
        "mlx5_0/ports/1/counters/port_xmit_wait",
        "mlx5_0/ports/1/hw_counters/out_of_buffer",
        "mlx4_0/ports/1/rate",
        "mlx4_0/ports/2/counters/link_downed",
        "mlx5_0/board_id",
    }

    collector = InfinibandCollector(tree, "n1", rediscover_s=3600)
    try:
        first = Scrape(collector)
        assert first.errors() == dict.fromkeys(broken, 1.0)
        second = Scrape(collector)
        # Files read at every scrape fail again; board_id is read at discovery only.
        assert second.errors() == {f: (1.0 if f == "mlx5_0/board_id" else 2.0) for f in broken}
        assert exposition(collector).count(b"krea_ib_read_errors_total{") == len(broken)
    finally:
        collector.close()

    gone = {
        ("krea_ib_symbol_error_total", "mlx5_0", "1", None),
        (SATURATED, "mlx5_0", "1", "symbol_error"),
        ("krea_ib_port_transmit_wait_total", "mlx5_0", "1", None),
        (SATURATED, "mlx5_0", "1", "port_xmit_wait"),
        ("krea_ib_hw_counters_total", "mlx5_0", "1", "out_of_buffer"),
        ("krea_ib_rate_bytes_per_second", "mlx4_0", "1", None),
        ("krea_ib_link_downed_total", "mlx4_0", "2", None),
        (SATURATED, "mlx4_0", "2", "link_downed"),
    }
    for (name, labels), value in clean.samples.items():
        ls = dict(labels)
        if (name, ls.get("device"), ls.get("port"), ls.get("counter")) in gone:
            assert (name, labels) not in second.samples
        elif name == "krea_ib_port_info" and ls["device"] == "mlx4_0" and ls["port"] == "1":
            assert second.one(name, device="mlx4_0", port="1", rate="") == 1
        elif name == "krea_ib_info" and ls["device"] == "mlx5_0":
            assert second.one(name, device="mlx5_0", board_id="", hca_type="MT4118") == 1
        else:
            assert second.samples.get((name, labels)) == value, (name, labels)


def test_huge_64_bit_values_are_floats_and_saturated(tree: Path) -> None:
    ext = port_dir(tree, "mlx5_0") / "counters_ext"
    ext.mkdir()
    (ext / "port_xmit_data_64").write_text("18446744073709551615\n")
    (port_dir(tree, "mlx5_0") / "hw_counters/rx_read_requests").write_text("18446744073709551615\n")
    ours = scrape(tree)
    assert ours.one("krea_ib_port_data_transmitted_bytes_total", device="mlx5_0") == float(
        (2**64 - 1) * 4
    )
    assert ours.one(SATURATED, device="mlx5_0", counter="port_xmit_data_64") == 1
    assert ours.one("krea_ib_hw_counters_total", counter="rx_read_requests") == float(2**64 - 1)
    assert ours.errors() == {}


def test_unreadable_file_mode_000(tree: Path) -> None:
    path = port_dir(tree, "mlx5_0") / "counters/symbol_error"
    rewrite(path, "3\n")
    path.chmod(0)
    ours = scrape(tree)
    if os.geteuid() == 0:
        # root reads it anyway (DAC is bypassed), so it is not an error
        assert ours.one("krea_ib_symbol_error_total", device="mlx5_0") == 3
        assert ours.errors() == {}
    else:
        assert ours.get("krea_ib_symbol_error_total", device="mlx5_0") is None
        assert ours.errors() == {"mlx5_0/ports/1/counters/symbol_error": 1}


@pytest.mark.timeout(20)
def test_a_fifo_in_place_of_a_counter_does_not_hang_the_scrape(tree: Path) -> None:
    path = port_dir(tree, "mlx5_0") / "counters/VL15_dropped"
    path.unlink()
    os.mkfifo(path)
    ours = scrape(tree)
    assert ours.get("krea_ib_vl15_dropped_total", device="mlx5_0") is None
    assert ours.errors() == {"mlx5_0/ports/1/counters/VL15_dropped": 1}
    assert ours.one("krea_ib_vl15_dropped_total", device="mlx4_0", port="1") == 0


def fail_reads(monkeypatch: pytest.MonkeyPatch, failures: dict[str, int]) -> None:
    """Make os.pread fail with the given errno for files whose path ends with a key."""
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        target = os.readlink(f"/proc/self/fd/{fd}")
        for suffix, code in failures.items():
            if target.endswith(suffix):
                raise OSError(code, os.strerror(code))
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)


def test_not_supported_errnos_are_absent_and_eio_is_an_error(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_reads(
        monkeypatch,
        {
            "mlx5_0/ports/1/counters/VL15_dropped": errno.EINVAL,  # ConnectX-7, procfs#704
            "mlx5_0/ports/1/hw_counters/rx_dct_connect": errno.EOPNOTSUPP,
            "mlx5_0/ports/1/counters/link_downed": errno.ENODATA,
            "mlx4_0/ports/1/rate": errno.EINVAL,  # no QSFP plugged, rdma-core#239
            "mlx5_0/ports/1/counters/symbol_error": errno.EIO,
        },
    )
    ours = scrape(tree)
    assert ours.get("krea_ib_vl15_dropped_total", device="mlx5_0") is None
    assert ours.get("krea_ib_hw_counters_total", counter="rx_dct_connect") is None
    assert ours.get("krea_ib_link_downed_total", device="mlx5_0") is None
    assert ours.get("krea_ib_rate_bytes_per_second", device="mlx4_0", port="1") is None
    assert ours.get("krea_ib_symbol_error_total", device="mlx5_0") is None
    assert ours.errors() == {"mlx5_0/ports/1/counters/symbol_error": 1}
    assert ours.one("krea_ib_port_data_received_bytes_total", device="mlx5_0") == 18126345378 * 4


# ---------------------------------------------------------------------------------------
# Cached descriptors and rediscovery


def test_cached_descriptors_see_files_rewritten_in_place(tree: Path) -> None:
    wait = port_dir(tree, "mlx5_0") / "counters/port_xmit_wait"
    collector = InfinibandCollector(tree, "n1", rediscover_s=3600)
    try:
        assert Scrape(collector).one("krea_ib_port_transmit_wait_total", device="mlx5_0") == 0
        rewrite(wait, "123456\n")
        rewrite(port_dir(tree, "mlx5_0") / "state", "1: DOWN\n")
        after = Scrape(collector)
        assert after.one("krea_ib_port_transmit_wait_total", device="mlx5_0") == 123456
        assert after.one("krea_ib_state_id", device="mlx5_0") == 1
        assert after.one("krea_ib_port_info", device="mlx5_0", state="1: DOWN") == 1
    finally:
        collector.close()


def test_values_and_saturation_follow_every_change_across_scrapes(tree: Path) -> None:
    wait = port_dir(tree, "mlx4_0") / "counters/port_xmit_wait"
    collector = InfinibandCollector(tree, "n1", rediscover_s=3600)
    seen = []
    try:
        for text in ("5\n", "5\n", "4294967295\n", "garbage\n", "4294967295\n", "5\n"):
            rewrite(wait, text)
            now = Scrape(collector)
            seen.append(
                (
                    now.get("krea_ib_port_transmit_wait_total", device="mlx4_0", port="1"),
                    now.get(SATURATED, device="mlx4_0", port="1", counter="port_xmit_wait"),
                    now.errors().get("mlx4_0/ports/1/counters/port_xmit_wait", 0),
                )
            )
    finally:
        collector.close()
    assert seen == [
        (5, 0, 0),
        (5, 0, 0),
        (2**32 - 1, 1, 0),
        (None, None, 1),
        (2**32 - 1, 1, 1),
        (5, 0, 1),
    ]


def test_a_device_added_later_appears_after_rediscovery(tree: Path) -> None:
    ib = tree / "class/infiniband"
    eager = InfinibandCollector(tree, "n1", rediscover_s=0)
    lazy = InfinibandCollector(tree, "n1", rediscover_s=3600)
    try:
        assert Scrape(eager).find("krea_ib_info", device="mlx5_1") == []
        assert Scrape(lazy).find("krea_ib_info", device="mlx5_1") == []
        shutil.copytree(ib / "mlx5_0", ib / "mlx5_1")
        rewrite(ib / "mlx5_1/ports/1/counters/port_xmit_wait", "77\n")
        assert Scrape(eager).one("krea_ib_port_transmit_wait_total", device="mlx5_1") == 77
        assert Scrape(lazy).find("krea_ib_info", device="mlx5_1") == []  # until rediscover_s
    finally:
        eager.close()
        lazy.close()


def test_a_device_that_disappears_is_rediscovered_at_once_without_errors(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector = InfinibandCollector(tree, "n1", rediscover_s=3600)
    try:
        assert Scrape(collector).find("krea_ib_info", device="mlx4_0") != []
        shutil.rmtree(tree / "class/infiniband/mlx4_0")
        # Real sysfs answers reads on a removed device's open files with ENODEV.
        fail_reads(monkeypatch, {"(deleted)": errno.ENODEV})
        after = Scrape(collector)
        assert [n for n, ls in after.samples if ("device", "mlx4_0") in ls] == []
        assert after.one("krea_ib_port_transmit_wait_total", device="mlx5_0") == 0
        assert after.errors() == {}
    finally:
        collector.close()


def test_without_cached_descriptors_the_scrape_is_the_same(tree: Path) -> None:
    cached = scrape(tree)
    uncached = scrape(tree, max_open_files=0)
    assert uncached.samples == cached.samples
    partly = scrape(tree, max_open_files=10)
    assert partly.samples == cached.samples


def test_close_releases_every_descriptor(tree: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    collector = InfinibandCollector(tree, "n1")
    registry = CollectorRegistry()
    registry.register(collector)  # describe() is [], so registering reads nothing
    assert open_fds() == before
    Scrape(collector)
    assert open_fds() > before + 50
    collector.close()
    assert open_fds() == before
    # Still usable: the next collect discovers again.
    assert Scrape(collector).one("krea_ib_state_id", device="mlx5_0") == 4
    collector.close()
    assert open_fds() == before


def test_concurrent_scrapes_all_see_the_whole_tree(tree: Path) -> None:
    collector = InfinibandCollector(tree, "n1", rediscover_s=0)
    expected = Scrape(collector).samples
    results: list[dict[Key, float]] = []
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(25):
                results.append(Scrape(collector).samples)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    collector.close()
    assert failures == []
    assert len(results) == 150
    assert all(r == expected for r in results)


# ---------------------------------------------------------------------------------------
# Bad input and exposition


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p / "file"])
def test_a_root_that_is_not_a_directory_is_bad_input(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="not an existing readable directory") as info:
        InfinibandCollector(make(tmp_path))
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_root_without_infiniband_yields_nothing(tmp_path: Path) -> None:
    (tmp_path / "class" / "net").mkdir(parents=True)
    collector = InfinibandCollector(tmp_path, "n1")
    assert list(collector.collect()) == []
    assert list(InfinibandCollector(tmp_path / "class", "n1").collect()) == []
    collector.close()


@pytest.mark.parametrize("root", [NODE_EXPORTER_TREE, PROCFS_TREE, "broken"])
def test_promtool_accepts_the_exposition(root: Path | str, tree: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        require_binary("promtool")  # skips (or fails under CI)
    if root == "broken":
        (port_dir(tree, "mlx5_0") / "counters/symbol_error").write_text("garbage\n")
        (port_dir(tree, "mlx5_0") / "counters/port_unknown").write_text("1\n")
        root = tree
    collector = InfinibandCollector(root, "n1")
    text = exposition(collector)
    collector.close()
    assert b"krea_ib_state_id" in text
    result = subprocess.run(
        [str(promtool), "check", "metrics"], input=text, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
