"""A thread pool the process does not wait for as it exits, but for the tasks it holds.

``concurrent.futures.ThreadPoolExecutor`` joins every one of its threads when the
interpreter exits, and asyncio's default executor is one: a read blocked on an API server
or a Prometheus that stopped answering then holds the process for the rest of its
timeout (30 s for the API server by default) after the operator pressed ``q``. Reads may
be abandoned: nothing is half-done by dropping one. Writes may not.

``DaemonPool`` runs its tasks on daemon threads, which the interpreter does not wait for.
``shutdown(wait=True)`` waits for the tasks that asked to be waited for (``held()``, what
the dashboard's actions run in) and for no other: the dashboard quits at once over a
stalled read, and only after a write in flight has finished.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool(ThreadPoolExecutor):
    """Up to ``max_workers`` daemon threads, started as tasks come (module docstring).
    A ``ThreadPoolExecutor`` by type only, which asyncio's ``set_default_executor``
    requires: its own threads, queue and shutdown replace the base class's."""

    def __init__(self, max_workers: int | None = None, name: str = "pool") -> None:
        # (the base class checks and defaults the size, asyncio's default, and starts no
        # thread: ``_max_workers`` and ``_thread_name_prefix`` are all this uses of it)
        super().__init__(max_workers, thread_name_prefix=name)
        self._tasks: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._closed = False
        self._held = 0
        self._released = threading.Condition()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[T] = Future()
            self._tasks.put((future, fn, args, kwargs))
            # a thread waiting for work takes it; else one more, up to the cap
            if not self._idle.acquire(blocking=False) and len(self._workers) < self._max_workers:
                name = f"{self._thread_name_prefix}_{len(self._workers)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                thread.start()
                self._workers.append(thread)
            return future

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                self._tasks.put(None)  # the others stop too
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # (the task's own, handed to its caller)
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs  # nothing of a task outlives it here
            self._idle.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The calling task is one ``shutdown(wait=True)`` waits for (a write)."""
        with self._released:
            self._held += 1
        try:
            yield
        finally:
            with self._released:
                self._held -= 1
                self._released.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more tasks; ``cancel_futures``: the queued ones cancelled. ``wait``: return
        once no task is ``held()``, whatever else still runs (its thread, a daemon, ends
        with its task or with the process)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        item = self._tasks.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            self._tasks.put(None)
        if wait:
            with self._released:
                self._released.wait_for(lambda: self._held == 0)
