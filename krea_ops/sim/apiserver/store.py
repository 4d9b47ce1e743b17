"""Object storage for the simulated API server: memory for reads, SQLite for durability.

Like etcd behind a watch cache: every object lives in memory (decoded, never mutated in
place, and as its JSON text so lists are spliced without re-encoding); every write goes
to SQLite (WAL) in the same critical section before it is acknowledged, so a process
killed at any point restarts with every acknowledged object and resumes resourceVersions
from where they stopped. One global resourceVersion sequence orders all writes; the last
``history`` writes are kept for watches, and a watch from before them gets 410 Gone.
"""

from __future__ import annotations

import bisect
import builtins
import json
import sqlite3
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    rkey TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (rkey, namespace, name)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StoreError(Exception):
    pass


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    pass


class Gone(StoreError):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


@dataclass(frozen=True, slots=True)
class Entry:
    rv: int
    obj: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rkey: str
    namespace: str
    name: str
    obj: dict[str, Any]
    text: str
    prev: dict[str, Any] | None


def _encode(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class Store:
    """Thread-safe; ``lock`` is re-entrant so a handler can read-modify-write atomically."""

    def __init__(self, path: Path | str | None = None, *, history: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._changed = threading.Condition(self.lock)
        target = ":memory:" if path is None else str(path)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._objects: dict[str, dict[tuple[str, str], Entry]] = {}
        self._sorted: dict[str, builtins.list[tuple[str, str]]] = {}
        self._history: deque[Change] = deque(maxlen=history)
        self._closed = False
        row = self._db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        self._rv = int(row[0]) if row else 1
        for rkey, ns, name, rv, data in self._db.execute(
            "SELECT rkey, namespace, name, rv, data FROM objects"
        ):
            self._objects.setdefault(rkey, {})[(ns, name)] = Entry(rv, json.loads(data), data)
        # Watches can resume from any version written from now on, not from before.
        self._oldest = self._rv

    # -- reads ------------------------------------------------------------------------

    @property
    def rv(self) -> int:
        return self._rv

    def get(self, rkey: str, namespace: str, name: str) -> Entry | None:
        return self._objects.get(rkey, {}).get((namespace, name))

    def _sorted_keys(self, rkey: str) -> builtins.list[tuple[str, str]]:
        """The keys of a kind in (namespace, name) order, re-sorted only after a create or
        delete of that kind (updates keep the order)."""
        keys = self._sorted.get(rkey)
        if keys is None:
            keys = self._sorted[rkey] = sorted(self._objects.get(rkey, {}))
        return keys

    def list(
        self, rkey: str, namespace: str | None = None, after: tuple[str, str] | None = None
    ) -> tuple[builtins.list[Entry], int]:
        """Entries sorted by (namespace, name), optionally only one namespace and only keys
        after ``after`` (a continue token's last key), and the list's resourceVersion."""
        with self.lock:
            bucket = self._objects.get(rkey, {})
            keys = self._sorted_keys(rkey)
            lo, hi = 0, len(keys)
            if namespace is not None:
                lo = bisect.bisect_left(keys, (namespace, ""))
                hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
            if after is not None:
                lo = max(lo, bisect.bisect_right(keys, after))
            return [bucket[k] for k in keys[lo:hi]], self._rv

    def count(self, rkey: str) -> int:
        return len(self._objects.get(rkey, {}))

    def namespaces_in_use(self, namespace: str) -> builtins.list[tuple[str, str]]:
        """(rkey, name) of every object in a namespace (for namespace deletion)."""
        with self.lock:
            return [
                (rkey, name)
                for rkey, bucket in self._objects.items()
                for (ns, name) in bucket
                if ns == namespace
            ]

    # -- writes -----------------------------------------------------------------------

    def _commit(
        self,
        change_type: str,
        rkey: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        prev: Entry | None,
    ) -> Entry:
        if self._closed:
            raise StoreError("store is closed")
        rv = self._rv + 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(rv)
        text = _encode(obj)
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if change_type == "DELETED":
                db.execute(
                    "DELETE FROM objects WHERE rkey=? AND namespace=? AND name=?", (rkey, ns, name)
                )
            else:
                db.execute(
                    "INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?)", (rkey, ns, name, rv, text)
                )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(rv),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._rv = rv
        entry = Entry(rv, obj, text)
        bucket = self._objects.setdefault(rkey, {})
        if change_type == "DELETED":
            bucket.pop((ns, name), None)
            self._sorted.pop(rkey, None)
        else:
            if (ns, name) not in bucket:
                self._sorted.pop(rkey, None)
            bucket[(ns, name)] = entry
        self._history.append(
            Change(rv, change_type, rkey, ns, name, obj, text, prev.obj if prev else None)
        )
        self._changed.notify_all()
        return entry

    def create(self, rkey: str, namespace: str, name: str, obj: dict[str, Any]) -> Entry:
        with self.lock:
            if (namespace, name) in self._objects.get(rkey, {}):
                raise AlreadyExists(name)
            return self._commit("ADDED", rkey, namespace, name, obj, None)

    def update(
        self,
        rkey: str,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        expect_rv: int | None = None,
    ) -> Entry:
        with self.lock:
            prev = self.get(rkey, namespace, name)
            if prev is None:
                raise NotFound(name)
            if expect_rv is not None and expect_rv != prev.rv:
                raise Conflict(name)
            return self._commit("MODIFIED", rkey, namespace, name, obj, prev)

    def delete(self, rkey: str, namespace: str, name: str, expect_rv: int | None = None) -> Entry:
        """Remove the object; the DELETED event carries it at the deletion's version."""
        with self.lock:
            prev = self.get(rkey, namespace, name)
            if prev is None:
                raise NotFound(name)
            if expect_rv is not None and expect_rv != prev.rv:
                raise Conflict(name)
            final = json.loads(prev.text)
            return self._commit("DELETED", rkey, namespace, name, final, prev)

    # -- watch ------------------------------------------------------------------------

    def changes_since(self, rv: int) -> builtins.list[Change]:
        """Changes with version > rv; Gone if the history no longer reaches back to rv."""
        with self.lock:
            oldest_kept = self._history[0].rv if self._history else self._rv + 1
            floor = max(self._oldest, oldest_kept - 1)
            if rv < floor:
                raise Gone(rv, floor)
            if rv >= self._rv:
                return []
            out = []
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                out.append(change)
            out.reverse()
            return out

    def wait_for_change(self, rv: int, timeout: float) -> bool:
        """Block until the store moves past rv (True) or the timeout passes (False)."""
        with self._changed:
            if self._rv > rv:
                return True
            self._changed.wait(timeout)
            return self._rv > rv

    def wake_watchers(self) -> None:
        with self._changed:
            self._changed.notify_all()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.lock:
            yield

    def close(self) -> None:
        with self.lock:
            if not self._closed:
                self._closed = True
                self._db.close()
                self._changed.notify_all()
