"""The dashboard's reads pause the cyclic collector and freeze what they built, so that no
full collection walks a fleet snapshot on screen; the collector always comes back on."""

from __future__ import annotations

import gc
import weakref
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


def _walkable_below(root: object) -> list[object]:
    """Every container and dataclass instance reachable from ``root`` through such."""
    found, seen, i = [root], {id(root)}, 0
    while i < len(found):
        for child in gc.get_referents(found[i]):
            if id(child) not in seen and gcpolicy._walked(child):
                seen.add(id(child))
                found.append(child)
        i += 1
    return found


def test_a_replaced_snapshot_is_freed_whole_and_never_a_wide_container_at_once() -> None:
    """``release`` frees every object of a replaced fleet snapshot (nothing kept alive),
    and lets go of it a few objects at a time: every container wider than ``WIDE`` (the
    fleet's nodes, its GPUs, its verdicts) has each of its items held and let go of one by
    one, so no single step frees thousands of objects in one C cascade, which holds the
    GIL from the UI thread (50-90 ms at 5,000 nodes)."""
    from krea_ops.sim.fixtures import synthetic_fleet

    snapshot = synthetic_fleet(300, seed=3)
    below = _walkable_below(snapshot)
    wide = [o for o in below if isinstance(o, gcpolicy._CONTAINERS) and len(o) > gcpolicy.WIDE]
    assert wide  # (the fleet's nodes at least)
    # a small budget, so that the bound is the wide containers' rule, not the walk's end
    held = gcpolicy._hold([snapshot], held=50)
    held_ids = {id(o) for o in held}
    assert len(held) < len(below)  # the walk stopped short of the whole
    for container in wide:
        assert id(container) in held_ids
        items = [c for c in gc.get_referents(container) if gcpolicy._walked(c)]
        assert all(id(c) in held_ids for c in items), type(container)
    held.clear()
    del below, wide, container, items, held_ids

    nodes = list(snapshot.telemetry.nodes.values()) if snapshot.telemetry else []
    assert nodes
    watched = [weakref.ref(nodes[0]), weakref.ref(nodes[-1]), weakref.ref(nodes[0].gpus[0])]
    doomed = [snapshot]
    del snapshot, nodes
    assert gcpolicy.release(doomed) > 0
    assert doomed == []
    assert [w() for w in watched] == [None, None, None]


def test_an_object_someone_still_holds_is_only_let_go_of() -> None:
    from krea_ops.sim.fixtures import synthetic_fleet

    snapshot = synthetic_fleet(20, seed=4)
    gcpolicy.release([snapshot])
    assert snapshot.telemetry is not None and len(snapshot.telemetry.nodes) == 20
