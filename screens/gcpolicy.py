"""Python's cyclic garbage collector, kept from stalling the dashboard at fleet scale.

A 5,000-node fleet read builds about a million objects (the snapshot: nodes, GPUs, ports,
verdicts) that live until the next read replaces them. Each full collection walks every
tracked object in the process, and with one snapshot on screen and the next being built
that is two million: 0.2-0.5 s of CPU on a quiet machine, seconds on a loaded one,
holding the GIL, so the UI thread cannot draw or take a key meanwhile
(docs/benchmarks.md, "Reads and the dashboard at 5,000 nodes").

So a fleet read runs with the collector paused (as a one-shot command's does,
``commands/common.gc_paused``), and what it built is then frozen (``gc.freeze``): moved
to the permanent generation that collections do not walk. The snapshot's objects are
acyclic (frozen dataclasses, tuples, dicts of values) and are freed by reference
counting when the next read replaces them, frozen or not. What a read leaves as cyclic
garbage would stay frozen, so every ``UNFREEZE_EVERY`` reads the permanent generation is
handed back to the collector, which then collects it once (one full walk every few
minutes instead of one every refresh).

A replaced read is freed on a worker, not the UI thread, but freeing is no Python code:
dropping the last reference to a 5,000-node snapshot deallocates its million objects in
one C cascade, 50-90 ms with the GIL held, so a key pressed then waited as long (the
"77 ms once in 40" of docs/benchmarks.md). ``release`` frees it a few objects at a
time instead, in a Python loop the interpreter hands the GIL over from every 5 ms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
import types
from collections.abc import Iterator
from typing import Any

UNFREEZE_EVERY = 60  # reads: ~5 min at the 5 s default refresh
# objects of a replaced read held one by one while it is released: below them each
# releases its own part of the rest at once (at 5,000 nodes ~50 objects, microseconds)
RELEASE_HELD = 5_000
WIDE = 64  # items: a container this wide is opened whatever the count held
OPEN_DEPTH = 3  # and every object this near the top
_CONTAINERS = (tuple, list, dict, set, frozenset, types.MappingProxyType)

_lock = threading.Lock()
_paused = 0  # reads in flight with the collector paused
_was_enabled = True
_reads = 0


@contextlib.contextmanager
def frozen_after() -> Iterator[None]:
    """The collector paused while the body runs (several reads at once share one pause),
    and what exists when the last of them ends frozen before it is resumed."""
    global _paused, _was_enabled, _reads
    with _lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            _reads += 1
            if _paused == 0:
                if _reads % UNFREEZE_EVERY == 0:
                    gc.unfreeze()  # (collected by the next full collection)
                else:
                    gc.freeze()
                if _was_enabled:
                    gc.enable()


def _walked(obj: object) -> bool:
    """A read's own structure: its containers and dataclass instances (not a class, a
    function or a module, whose referents are the program's)."""
    if isinstance(obj, _CONTAINERS):
        return True
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def release(doomed: list[Any], held: int = RELEASE_HELD) -> int:
    """Free what ``doomed`` holds (emptied). The objects below it, breadth first up to
    ``held`` of them (and below every object within ``OPEN_DEPTH`` of the top and every
    container wider than ``WIDE``), are each held here, then let go parents first, one
    at a time: each frees itself and, below the walk, its own few objects, never one
    cascade of the whole. An object someone else still holds is only let go of here (it
    is freed where its last holder lets go, as without this). Returns how many objects
    were held."""
    keep = _hold(doomed, held)
    for j in range(len(keep)):
        keep[j] = None
    return len(keep)


def _hold(doomed: list[Any], held: int) -> list[Any]:
    """``doomed``'s objects and those below them that ``release`` holds, parents first
    (``doomed`` emptied)."""
    keep: list[Any] = list(doomed)
    depth = [0] * len(keep)
    doomed.clear()
    seen = {id(o) for o in keep}
    i = 0
    while i < len(keep):
        obj, level = keep[i], depth[i]
        i += 1
        # past ``held``, only the read's top (a snapshot's fields and theirs: where its
        # fleet-wide collections hang) and wide containers are still opened, so that no
        # collection of thousands is freed as one cascade
        if (
            len(keep) >= held
            and level >= OPEN_DEPTH
            and not (isinstance(obj, _CONTAINERS) and len(obj) > WIDE)
        ):
            continue
        for child in gc.get_referents(obj):
            if id(child) not in seen and _walked(child):
                seen.add(id(child))
                keep.append(child)
                depth.append(level + 1)
    return keep
