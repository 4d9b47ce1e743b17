"""The dashboard's reads pause the cyclic collector and freeze what they built, so that no
full collection walks a fleet snapshot on screen; the collector always comes back on."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from screens import gcpolicy


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_a_read_runs_paused_and_leaves_its_objects_frozen() -> None:
    gc.enable()
    gc.unfreeze()
    gcpolicy._reads = 0
    with gcpolicy.frozen_after():
        assert not gc.isenabled()
        built = [{"node": i} for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


def test_overlapping_reads_resume_the_collector_once_the_last_ends() -> None:
    gc.enable()
    first, second = gcpolicy.frozen_after(), gcpolicy.frozen_after()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_the_frozen_objects_go_back_to_the_collector_every_so_many_reads() -> None:
    gc.enable()
    gcpolicy._reads = gcpolicy.UNFREEZE_EVERY - 1
    gc.freeze()
    assert gc.get_freeze_count() > 0
    with gcpolicy.frozen_after():
        pass
    assert gc.get_freeze_count() == 0  # (a cycle left by a read is collectable again)


def test_a_collector_the_caller_had_off_stays_off() -> None:
    gc.disable()
    with gcpolicy.frozen_after():
        pass
    assert not gc.isenabled()
