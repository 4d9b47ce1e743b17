"""DaemonPool: the thread pool a quitting process does not wait for, but for the tasks it
holds (krea_ops/daemon_pool.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError

import pytest

from krea_ops.daemon_pool import DaemonPool
from tests.conftest import ROOT


def test_tasks_run_side_by_side_up_to_the_cap_and_hand_back_results_and_errors() -> None:
    pool = DaemonPool(3, name="t")
    gate = threading.Event()
    running: list[str] = []
    lock = threading.Lock()

    def task(name: str) -> str:
        with lock:
            running.append(name)
        gate.wait(10)
        return name.upper()

    futures = [pool.submit(task, n) for n in "abcde"]
    deadline = time.monotonic() + 10
    while len(running) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(running) == 3  # the cap: two wait their turn
    gate.set()
    assert [f.result(10) for f in futures] == list("ABCDE")
    failed = pool.submit(int, "x")
    with pytest.raises(ValueError):
        failed.result(10)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int, "1")


def test_shutdown_cancels_the_queued_tasks_and_waits_only_for_the_held_ones() -> None:
    pool = DaemonPool(2, name="t")
    stalled, writing, write_may_end = threading.Event(), threading.Event(), threading.Event()
    wrote: list[str] = []

    def read() -> None:
        stalled.wait(60)  # a read blocked on a server that stopped answering

    def write() -> None:
        with pool.held():
            writing.set()
            write_may_end.wait(10)
            wrote.append("done")

    pool.submit(read)
    pool.submit(write)
    queued = pool.submit(read)  # no thread left for it
    assert writing.wait(10)
    ended = threading.Event()
    closer = threading.Thread(target=lambda: (pool.shutdown(cancel_futures=True), ended.set()))
    closer.start()
    assert queued.cancelled()
    with pytest.raises(CancelledError):
        queued.result(0)
    assert not ended.wait(0.5), "shutdown returned while a held write was still running"
    write_may_end.set()
    assert ended.wait(10), "shutdown still waits, with only a stalled read left"
    assert wrote == ["done"]
    stalled.set()


def test_a_process_exits_without_waiting_for_a_stalled_task() -> None:
    """With ``ThreadPoolExecutor`` this process would wait the task's 120 s at exit."""
    code = (
        "import time\n"
        "from krea_ops.daemon_pool import DaemonPool\n"
        "pool = DaemonPool(2)\n"
        "pool.submit(time.sleep, 120)\n"
        "pool.shutdown(wait=True)\n"  # no task held: returns at once
        "print('bye')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout == "bye\n", done.stderr
