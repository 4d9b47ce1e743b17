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
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

UNFREEZE_EVERY = 60  # reads: ~5 min at the 5 s default refresh

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
