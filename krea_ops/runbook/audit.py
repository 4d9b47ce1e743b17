"""The local audit log: one JSON object per line, appended, fsync'd per record, never
rewritten.

An action writes a ``start`` record (who, why, when, the plan), one ``step`` record per
step as it ends (its outcome and the calls it made) and an ``end`` record, all with the
same ``run_id``; an action killed between two steps leaves its ``start`` and the steps it
finished, and the next run (which converges) is a new ``run_id``. Every line is passed
through ``kube.events.redact`` with the client's own credentials before it is written:
no token and nothing of the kubeconfig's content ever lands in the file.

Where: the ``audit_log`` setting (``KREA_OPS_AUDIT_LOG``), else
``$XDG_STATE_HOME/krea-ops/audit.jsonl``, else ``~/.local/state/krea-ops/audit.jsonl``.
The file is created readable by its owner only (it names nodes, pods and people).

A writer killed mid-record (``kill -9``, a crash) leaves at most that one record torn, as
an unparseable last line; the next append starts on a new line, so a reader that skips
lines that do not parse (``jq -R 'fromjson?'``) sees every whole record.
"""

from __future__ import annotations

import getpass
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from krea_ops.errors import Unavailable
from krea_ops.kube.events import redact


def default_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "krea-ops" / "audit.jsonl"


def kubeconfig_user(kubeconfig: str | None, context: str | None) -> str:
    """Who acts, as the kubeconfig names them: the user of the context in use (the name
    only, never its credentials); ``in-cluster service account`` inside a pod."""
    from kubernetes.config import kube_config

    from krea_ops.kube.client import kubeconfig_path

    path = kubeconfig_path(kubeconfig)
    if path is None:
        return "in-cluster service account"
    try:
        contexts, current = kube_config.list_kube_config_contexts(config_file=path)
    except Exception:  # an unreadable kubeconfig fails the connection with its own line
        return "unknown"
    chosen = current
    if context:
        chosen = next((c for c in contexts or () if c.get("name") == context), current)
    user = ((chosen or {}).get("context") or {}).get("user")
    return str(user) if user else "unknown"


def local_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without /etc/passwd entry)
        return str(os.getuid())


def _after_torn_tail(fd: int) -> bytes:
    """A newline when the file does not end in one: a writer killed mid-record left half a
    line there, and the next record must start a line of its own rather than glue onto
    it (the half line stays as it is, unparseable; every whole record parses)."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        return b"\n"
    return b""


def _write_all(fd: int, data: bytes) -> None:
    """One write is normally all of it; a short one (a full disk, a signal) goes on from
    where it stopped, so the record is never left half written by us."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class AuditLog:
    """Append-only JSON lines; safe to share between threads."""

    def __init__(self, path: Path | str, *, secrets: Iterable[str] = ()) -> None:
        self.path = Path(path).expanduser()
        self.secrets = tuple(secrets)
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record and fsync it; Unavailable (exit 1) when the file cannot be
        written, before the action's first write when it is the ``start`` record."""
        line = redact(orjson.dumps(dict(record)).decode(), self.secrets) + "\n"
        data = line.encode()
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                # O_RDWR only to look at the last byte; O_APPEND puts every write at the
                # end, so nothing already in the file is ever overwritten or truncated.
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    _write_all(fd, _after_torn_tail(fd) + data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise Unavailable(
                    f"cannot write the audit log {self.path}: {exc.strerror or exc}; "
                    "set KREA_OPS_AUDIT_LOG to a writable file"
                ) from None
