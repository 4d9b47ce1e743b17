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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from krea_ops.errors import Unavailable
from krea_ops.kube.events import redact
from krea_ops.runbook.plan import Plan, StepKind


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


# -- replay: what earlier runs of a command did, from the log's tail ------------------

# how much of the audit log's end is read for Events an interrupted run owes: a rerun
# follows the run it finishes, and a bounded read keeps a long-lived log cheap (a
# controller runs a plan most passes)
OWED_LOOKBACK_BYTES = 256 << 10


def tail_records(path: Path, action: str, limit: int = OWED_LOOKBACK_BYTES) -> list[dict[str, Any]]:
    """The whole records of ``action`` among the last ``limit`` bytes of the audit log (a
    line cut by the window or by a crash is skipped; only lines naming the action are
    parsed); none when the log cannot be read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - limit)
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if start:
        lines = lines[1:]  # the window's first line is a part of one
    named = b'"action":' + orjson.dumps(action)  # every record carries its run's action
    out = []
    for line in lines:
        if named not in line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _same_command(plan: Plan, other: Any) -> bool:
    if not isinstance(other, dict):
        return False
    nodes = other.get("nodes")
    return (
        other.get("action") == plan.action
        and other.get("subject") == plan.subject
        and isinstance(nodes, list)
        and sorted(map(str, nodes)) == sorted(plan.nodes)
    )


def _event_key(regarding: dict[str, Any], reason: Any) -> tuple[str, str, str, str]:
    return (
        str(regarding.get("kind", "")),
        str(regarding.get("namespace", "")),
        str(regarding.get("name", "")),
        str(reason),
    )


def owed_events(
    plan: Plan, records: list[dict[str, Any]]
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The Events that earlier runs of the same command made the change for and never
    recorded: (run_id, the Event's content, its planned call), in the order owed.

    A run owes the Event step right after its last recorded step when that step ended
    ``done`` or ``unchanged`` (the change is made) and the Event step never ran: the run
    was killed or stopped in between. A later run that records that Event (a step of its
    own, or a repayment) pays it."""
    starts: dict[str, dict[str, Any]] = {}
    ran: dict[str, dict[int, str]] = {}
    order: list[str] = []
    for record in records:
        run_id = str(record.get("run_id") or "")
        kind = record.get("record")
        if kind == "start" and record.get("action") == plan.action:
            if _same_command(plan, record.get("plan")):
                starts[run_id], ran[run_id] = record, {}
                order.append(run_id)
        elif kind == "step" and run_id in ran:
            try:
                ran[run_id][int(record.get("step") or 0)] = str(record.get("status"))
            except (TypeError, ValueError):
                continue
    owed: dict[tuple[str, str, str, str], tuple[str, dict[str, Any], dict[str, Any]]] = {}
    for run_id in order:
        start = starts[run_id]
        steps = (start.get("plan") or {}).get("steps") or []
        specs = {}
        for spec in start.get("events") or ():
            if isinstance(spec, dict) and isinstance(spec.get("regarding"), dict):
                specs[int(spec.get("step") or 0)] = spec
        done = ran[run_id]
        for index, spec in specs.items():
            if index in done:  # recorded (or tried: Events are best effort) by this run
                owed.pop(_event_key(spec["regarding"], spec.get("reason")), None)
        if not done:
            continue
        last = max(done)
        spec = specs.get(last + 1)
        if spec is None or done[last] not in ("done", "unchanged") or len(steps) <= last:
            continue
        calls = steps[last].get("calls") or []
        if calls and isinstance(calls[0], dict):
            owed[_event_key(spec["regarding"], spec.get("reason"))] = (run_id, spec, calls[0])
    planned = {
        _event_key(s.event.regarding.as_dict(), s.event.reason)
        for s in plan.steps
        if s.kind is StepKind.EVENT and s.event is not None
    }
    return [v for k, v in owed.items() if k not in planned]


def interrupted_calls(
    plan: Plan, audit_log: Path | None, path_suffix: str, options: Sequence[str] = ()
) -> int:
    """How many calls whose path ends with ``path_suffix`` (``/eviction``) the runs of
    ``plan``'s command (same action, subject, nodes, and ``options`` keys) made with
    success since one last ran to its end, from the audit log's tail: what a rerun of a
    killed command must not do again beyond its own bound (``burst migrate --max``)."""
    if audit_log is None:
        return 0
    records = tail_records(audit_log, plan.action)
    same = {
        str(r.get("run_id"))
        for r in records
        if r.get("record") == "start"
        and _same_command(plan, r.get("plan"))
        and all(
            ((r.get("plan") or {}).get("options") or {}).get(k) == plan.options.get(k)
            for k in options
        )
    }
    count = 0
    for r in records:  # in the order written
        run_id = str(r.get("run_id"))
        if run_id not in same:
            continue
        if r.get("record") == "end":
            count = 0  # the command ran to its end: what came before was its own
            continue
        if r.get("record") != "step":
            continue
        for call in r.get("calls") or ():
            if not isinstance(call, dict):
                continue
            status = call.get("http_status")
            ok = isinstance(status, int) and 200 <= status < 300
            if ok and str(call.get("path", "")).endswith(path_suffix):
                count += 1
    return count


def owes_events(plan: Plan, audit_log: Path | None) -> bool:
    """Whether an interrupted run of ``plan``'s command owes an Event (``owed_events``):
    a command with nothing else left to do still runs, to record it."""
    if audit_log is None:
        return False
    return bool(owed_events(plan, tail_records(audit_log, plan.action)))
