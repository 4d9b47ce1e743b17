"""The node exporter under faults: a GPU lost mid-scrape, an NVML call that hangs, sysfs
files and whole HCAs vanishing while read, counters that reset, scrapers that hang up.

Each test asserts what a user of the metrics notices; the counts of injections are the
figures in docs/reliability.md ("Exporters")."""

from __future__ import annotations

import functools
import itertools
import shutil
import socket
import struct
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.exporters.fakenvml import FakeNvml, fake_h200_node
from krea_ops.exporters.infiniband import InfinibandCollector
from krea_ops.exporters.nvml import GpuCollector
from krea_ops.exporters.server import Exporter, HttpEndpoint
from tests.conftest import PROCFS_TREE, cli, wait_for
from tests.exporters.test_gpu_collector import Scrape
from tests.exporters.test_infiniband import Scrape as IbScrape

GPUS = 8


@pytest.fixture
def node() -> FakeNvml:
    fake = fake_h200_node(count=GPUS, seed=3)
    fake.nvmlInit()
    return fake


@pytest.fixture
def make_collector(node: FakeNvml) -> Iterator[Callable[..., GpuCollector]]:
    made: list[GpuCollector] = []

    def make(**kwargs: Any) -> GpuCollector:
        kwargs.setdefault("gpm_interval_s", 0.05)
        kwargs.setdefault("event_wait_ms", 20)
        collector = GpuCollector(node, "n1", **kwargs)
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "krea-gpu-read"]


def assert_intact(s: Scrape, gpus: set[str]) -> None:
    """Every GPU in ``gpus`` is up with its readings."""
    for gpu in gpus:
        assert s.one("krea_gpu_up", gpu=gpu) == 1.0, gpu
        assert s.one("krea_gpu_temperature_celsius", gpu=gpu) > 0, gpu
        assert len(s.values("krea_nvlink_errors_total", gpu=gpu)) == 18 * 4, gpu


# -- a GPU lost mid-scrape --------------------------------------------------------------

# Functions the collector calls on a GPU during one scrape, in its order: the GPU falls off
# the bus just as each is called, i.e. after the earlier readings of that GPU were taken.
LOST_AT = (
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkErrorCounter",
)


def test_a_gpu_lost_mid_scrape_is_down_whole_and_the_others_are_intact(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    collector = make_collector()
    first = Scrape(collector)
    uuid = first.labelsets("krea_gpu_up", gpu="3")[0]["uuid"]
    injected = 0
    for _round in range(3):
        for function in LOST_AT:
            gpu = node.gpus[3]
            gpu.lost = False
            assert Scrape(collector).one("krea_gpu_up", gpu="3") == 1.0
            node.before_next(function, functools.partial(setattr, gpu, "lost", True), gpu_index=3)
            s = Scrape(collector)
            injected += 1
            assert s.one("krea_gpu_up", gpu="3") == 0.0, function
            assert s.one("krea_gpu_down_info", gpu="3", reason="gpu_is_lost") == 1.0
            # no half-read GPU: none of the readings taken before it fell off are served
            readings = {n for n, ls, _ in s.samples if ls.get("gpu") == "3"}
            assert readings <= {"krea_gpu_up", "krea_gpu_down_info", "krea_gpu_nvml_errors_total"}
            assert s.labelsets("krea_gpu_up", gpu="3")[0]["uuid"] == uuid  # labels kept
            assert_intact(s, {str(i) for i in range(GPUS)} - {"3"})
    assert injected == 18
    node.gpus[3].lost = False
    assert_intact(Scrape(collector), {str(i) for i in range(GPUS)})


# -- NVML hanging -----------------------------------------------------------------------


class Hang:
    """An NVML call stuck in the driver until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        self.release.wait(120)


def scrape_in_thread(collector: GpuCollector) -> Scrape:
    """A scrape on its own thread, so a scrape that does not come back fails the test
    (instead of hanging it) while the NVML call is still stuck."""
    result: list[Scrape] = []
    thread = threading.Thread(target=lambda: result.append(Scrape(collector)), daemon=True)
    thread.start()
    thread.join(60)
    assert result, "the scrape did not come back while an NVML call was hung"
    return result[0]


def test_a_hung_nvml_call_costs_its_gpu_not_the_scrape_and_holds_one_thread(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    collector = make_collector(call_timeout_s=0.5, scrape_timeout_s=5.0)
    collector.start()
    hang = Hang()
    node.before_next("nvmlDeviceGetPowerUsage", hang, gpu_index=2)
    try:
        others = {str(i) for i in range(GPUS)} - {"2"}
        for scrape_number in range(5):
            s = scrape_in_thread(collector)
            assert hang.entered.is_set() and not hang.release.is_set()
            assert s.one("krea_gpu_up", gpu="2") == 0.0
            assert s.one("krea_gpu_down_info", gpu="2", reason="timeout") == 1.0
            assert s.labelsets("krea_gpu_up", gpu="2")[0]["uuid"].startswith("GPU-")
            assert_intact(s, others)
            assert s.one("krea_gpu_nvml_calls_hung") == 1.0
            # the hung call is counted once, not once per scrape it is still stuck
            assert s.errors("2", "timeout") == 1.0, scrape_number
            # no new read of the hung GPU is started while its call is stuck: once the
            # reader of the others ends, one thread is left, the stuck one
            assert wait_for(lambda: len(reader_threads()) == 1)
    finally:
        hang.release.set()
    recovered = wait_for(
        lambda: (s := Scrape(collector)).values("krea_gpu_up", gpu="2") == [1.0] and s
    )
    assert_intact(recovered, {str(i) for i in range(GPUS)})
    assert recovered.one("krea_gpu_nvml_calls_hung") == 0.0
    assert wait_for(lambda: reader_threads() == [])


def test_every_gpu_hanging_at_once_still_gives_a_scrape(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    collector = make_collector(call_timeout_s=0.5, scrape_timeout_s=60.0)
    hang = Hang()
    node.before_next("nvmlDeviceGetTotalEccErrors", hang, times=GPUS)
    try:
        s = scrape_in_thread(collector)
        assert s.values("krea_gpu_up") == [0.0] * GPUS
        assert len(s.values("krea_gpu_down_info", reason="timeout")) == GPUS
        assert s.one("krea_gpu_nvml_calls_hung") == float(GPUS)
        assert wait_for(lambda: len(reader_threads()) == GPUS)  # bounded: one per GPU
        again = scrape_in_thread(collector)
        assert again.one("krea_gpu_nvml_calls_hung") == float(GPUS)
        assert again.values("krea_gpu_nvml_errors_total", kind="timeout") == [1.0] * GPUS
        assert len(reader_threads()) == GPUS
    finally:
        hang.release.set()
    wait_for(lambda: Scrape(collector).values("krea_gpu_up") == [1.0] * GPUS)
    assert wait_for(lambda: reader_threads() == [])


def gpm_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "krea-gpu-gpm"]


def test_a_gpm_sample_hung_on_one_gpu_does_not_stop_tensor_activity_of_the_others(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    collector = make_collector(call_timeout_s=0.5, gpm_interval_s=0.05)
    collector.start()
    wait_for(lambda: len(Scrape(collector).values("krea_gpu_tensor_active_ratio")) == GPUS)
    hang = Hang()
    node.before_next("nvmlGpmSampleGet", hang, gpu_index=2)
    try:
        assert hang.entered.wait(30)
        at_hang = Scrape(collector).one("krea_gpu_gpm_sample_timestamp_seconds", gpu="0")

        def sampled_again() -> Scrape | None:
            s = scrape_in_thread(collector)  # a scrape notices the stuck GPM thread
            newer = s.one("krea_gpu_gpm_sample_timestamp_seconds", gpu="0") > at_hang
            return s if newer else None

        wait_for(sampled_again, timeout=30)
        # two samples past the hang: the others' tensor activity is computed afresh
        s = wait_for(
            lambda: (
                (s := Scrape(collector)).one("krea_gpu_gpm_sample_timestamp_seconds", gpu="7")
                > at_hang + 0.1
                and s
            ),
            timeout=30,
        )
        others = [str(i) for i in range(GPUS) if i != 2]
        assert all(s.values("krea_gpu_tensor_active_ratio", gpu=g) for g in others)
        assert len(gpm_threads()) == 2  # the stuck one and the one that took over
    finally:
        hang.release.set()
    assert wait_for(lambda: len(gpm_threads()) == 1)
    wait_for(lambda: len(Scrape(collector).values("krea_gpu_tensor_active_ratio")) == GPUS)


def test_the_scrape_deadline_bounds_a_scrape_and_leaves_what_it_could_not_read_unknown(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    """The per-call timeout is longer than the scrape's deadline here: the scrape still
    answers at its deadline. A GPU it had no time for is unknown (its series absent),
    not down: slowness is no evidence against the GPU. The GPUs queued behind the slow
    one are read in the next scrape."""
    collector = make_collector(call_timeout_s=600.0, scrape_timeout_s=1.0)
    hang = Hang()
    node.before_next("nvmlDeviceGetPowerUsage", hang, gpu_index=3)
    others = {str(i) for i in range(GPUS)} - {"3"}
    try:
        first = scrape_in_thread(collector)
        assert hang.entered.is_set()
        assert first.values("krea_gpu_up", gpu="3") == []
        assert first.values("krea_gpu_down_info") == []

        def others_intact() -> Scrape | None:
            s = scrape_in_thread(collector)
            return s if len(s.values("krea_gpu_up")) == GPUS - 1 else None

        s = wait_for(others_intact, timeout=60)
        assert_intact(s, others)
        assert s.values("krea_gpu_up", gpu="3") == []
        assert s.errors("3", "timeout") == 0.0
        assert s.one("krea_gpu_nvml_calls_hung") == 0.0
    finally:
        hang.release.set()
    wait_for(lambda: Scrape(collector).values("krea_gpu_up") == [1.0] * GPUS)


# -- counters that go backwards ---------------------------------------------------------


def test_nvlink_sums_never_go_down_when_a_link_counter_resets(
    node: FakeNvml, make_collector: Callable[..., GpuCollector]
) -> None:
    """Per-link counters are the hardware's (a reset shows as a decrease, which
    Prometheus' rate() reads as a reset); the per-GPU sums the exporter makes never go
    down, and grow by exactly the errors that happened."""
    collector = make_collector()
    links = node.gpus[1].nvlinks
    links[4].replay, links[9].replay = 100, 50
    s = Scrape(collector)
    assert s.one("krea_gpu_nvlink_errors_total", gpu="1", counter="replay") == 150.0
    exported = [150.0]
    happened = 0
    resets = 0
    for step in range(30):
        link = links[4 if step % 2 else 9]
        if step % 5 == 0:
            link.replay = 0  # reset (nvmlDeviceResetNvLinkErrorCounters)
            resets += 1
        link.replay += 3
        happened += 3
        s = Scrape(collector)
        exported.append(s.one("krea_gpu_nvlink_errors_total", gpu="1", counter="replay"))
        assert s.one("krea_nvlink_errors_total", gpu="1", link="4", counter="replay") == float(
            links[4].replay
        )
    assert resets == 6
    assert all(b >= a for a, b in itertools.pairwise(exported)), exported
    assert exported[-1] - exported[0] == happened


def test_an_ib_counter_reset_is_exported_as_read_with_no_error(tmp_path: Path) -> None:
    """perfquery -R or a driver reload zeroes the port counters: the exporter serves the
    new value (Prometheus counts from it again), not the old one held, and no error."""
    root = tmp_path / "sys"
    shutil.copytree(PROCFS_TREE, root)
    counter = root / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    collector = InfinibandCollector(root, "n1", rediscover_s=3600)
    try:
        values = []
        for text in ("1000", "1010", "0", "7"):
            with open(counter, "r+") as f:  # rewritten in place, as sysfs does
                f.truncate(0)
                f.write(text + "\n")
            s = IbScrape(collector)
            values.append(s.one("krea_ib_symbol_error_total", device="mlx5_0"))
            assert s.errors() == {}
        assert values == [1000.0, 1010.0, 0.0, 7.0]
    finally:
        collector.close()


# -- sysfs vanishing while read (hot-unplug) --------------------------------------------

IB = "class/infiniband"


def ib_tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(PROCFS_TREE, root)
    return root


def devices_of(s: IbScrape) -> set[str]:
    return {labels["device"] for labels, _ in s.find("krea_ib_info")}


def test_files_a_port_and_a_whole_hca_vanishing_after_listing_drop_out_without_errors(
    tmp_path: Path,
) -> None:
    """Listed at discovery, gone by the read: their series drop out, the rest of the
    scrape is intact, no error is counted (an unplug is no read error) and nothing raises.
    Files are opened at each read here (no cached descriptors): on a temp directory a
    cached descriptor of a removed file still reads, where sysfs answers ENODEV
    (test_infiniband covers that path)."""
    root = ib_tree(tmp_path)
    collector = InfinibandCollector(root, "n1", rediscover_s=3600, max_open_files=0)
    try:
        before = IbScrape(collector)
        assert devices_of(before) == {"hfi1_0", "mlx4_0", "mlx5_0"}
        hfi = {k: v for k, v in before.samples.items() if ("device", "hfi1_0") in k[1]}
        # one counter file goes
        (root / IB / "mlx4_0/ports/1/counters/symbol_error").unlink()
        s = IbScrape(collector)
        assert s.find("krea_ib_symbol_error_total", device="mlx4_0", port="1") == []
        assert s.find("krea_ib_symbol_error_total", device="mlx4_0", port="2") != []
        assert s.errors() == {}
        # a whole port goes
        shutil.rmtree(root / IB / "mlx4_0/ports/2")
        s = IbScrape(collector)
        assert s.find("krea_ib_port_info", device="mlx4_0", port="2") == []
        assert s.find("krea_ib_port_info", device="mlx4_0", port="1") != []
        assert s.errors() == {}
        # the whole HCA goes
        shutil.rmtree(root / IB / "mlx5_0")
        s = IbScrape(collector)
        assert devices_of(s) == {"hfi1_0", "mlx4_0"}
        assert [k for k in s.samples if ("device", "mlx5_0") in k[1]] == []
        assert s.errors() == {}
        assert {k: v for k, v in s.samples.items() if ("device", "hfi1_0") in k[1]} == hfi
    finally:
        collector.close()


def test_an_hca_unplugged_and_replugged_while_scraped_never_breaks_a_scrape(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """One thread removes and restores mlx5_0 (files, ports, the device directory) as fast
    as it can while scrapes run: every scrape completes, the other HCAs are whole in each
    one, and any read error is for a file of the HCA being unplugged."""
    root = ib_tree(tmp_path)
    device = root / IB / "mlx5_0"
    stop = threading.Event()
    flips = [0]

    def unplug_replug() -> None:
        while not stop.is_set():
            for path in sorted(device.rglob("*"), reverse=True):
                if path.is_file():
                    path.unlink()
            shutil.rmtree(device)
            shutil.copytree(PROCFS_TREE / IB / "mlx5_0", device)
            flips[0] += 1

    collector = InfinibandCollector(root, "n1", rediscover_s=0)  # rediscover every scrape
    whole = IbScrape(collector)
    expected = {k for k in whole.samples if dict(k[1]).get("device") in ("hfi1_0", "mlx4_0")}
    mutator = threading.Thread(target=unplug_replug, daemon=True)
    mutator.start()
    scrapes = 0
    try:
        while scrapes < 300 or flips[0] < 20:
            s = IbScrape(collector)
            scrapes += 1
            assert expected <= set(s.samples)
            assert all(f.startswith("mlx5_0/") or f == "." for f in s.errors()), s.errors()
            if scrapes > 5000:
                break
    finally:
        stop.set()
        mutator.join(30)
        collector.close()
    assert flips[0] >= 20, flips
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


# -- a scraper hanging up mid-response --------------------------------------------------


@pytest.fixture
def served(node: FakeNvml) -> Iterator[HttpEndpoint]:
    gpu = GpuCollector(node, "n1", gpm_interval_s=0.05, event_wait_ms=20)
    gpu.start()
    ib = InfinibandCollector(PROCFS_TREE, "n1")
    exporter = Exporter(node="n1", collectors=[gpu, ib])
    endpoint = HttpEndpoint(exporter, "127.0.0.1:0", client_timeout_s=2.0)
    try:
        yield endpoint
    finally:
        endpoint.stop()
        exporter.close()


def handler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("Thread-"))


def full_scrape(url: str) -> dict[str, list[Any]]:
    body = urllib.request.urlopen(url, timeout=30).read().decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_scrapers_hanging_up_mid_response_neither_kill_nor_wedge_the_server(
    served: HttpEndpoint, capfd: pytest.CaptureFixture[str]
) -> None:
    idle = handler_threads()  # no connection yet
    baseline = full_scrape(served.url)
    assert [s.value for s in baseline["krea_gpu_up"]] == [1.0] * GPUS
    hangups = 0
    for i in range(40):
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answer backs up
        client.settimeout(30)
        client.connect((served.host, served.port))
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n")
        got = client.recv(1 + i * 100)  # some of the answer, up to ~4 KB
        assert got.startswith(b"H")
        if i % 2:  # a killed scraper's host answers with a reset
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        hangups += 1
    # a scraper that goes silent mid-response without hanging up (its host gone)
    silent = socket.create_connection((served.host, served.port), timeout=30)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    silent.sendall(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n")
    assert silent.recv(16).startswith(b"HTTP/1.1 200")
    try:
        after = full_scrape(served.url)
        assert [s.value for s in after["krea_gpu_up"]] == [1.0] * GPUS
        assert len(after["krea_ib_info"]) == 3
        # every handler thread ends: the hung-up ones at once, the silent one at the
        # client timeout
        assert wait_for(lambda: handler_threads() <= idle, timeout=60)
    finally:
        silent.close()
    assert hangups == 40
    aborted = full_scrape(served.url)["krea_exporter_scrape_aborted_total"][0].value
    assert 0 < aborted <= hangups + 1
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


# -- the budget's settings --------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--nvml-timeout", "0"), ("--gpu-scrape-timeout", "-1"), ("--nvml-timeout", "nan")],
)
def test_a_budget_that_is_not_a_positive_number_is_bad_input(flag: str, value: str) -> None:
    result = cli(
        "exporter", "once", "--gpu-backend", "fake", "--sysfs", str(PROCFS_TREE), flag, value
    )
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], result.stderr
    assert result.stdout == ""
