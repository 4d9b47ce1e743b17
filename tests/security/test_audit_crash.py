"""The audit log survives its writer dying mid-record: a process appending through the
product's ``AuditLog`` is killed again and again (SIGKILL at seeded random moments, and
stopped by the kernel inside a write by a file-size limit), and after each death the file
still holds every record whose append returned, whole, with at most the interrupted one
torn; the next writer starts a new line, so nothing after a crash is lost either."""

from __future__ import annotations

import hashlib
import random
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from krea_ops.runbook.audit import AuditLog
from tests.conftest import ROOT

# The child: appends records of seeded sizes (64 KiB - 1 MiB, so a kill has a write to
# land in) and prints "gen seq" once each append has returned (written and fsync'd).
# With a byte limit it runs under RLIMIT_FSIZE: the write that crosses it is cut short by
# the kernel and the next one kills the process (SIGXFSZ), a death inside a record.
CHILD = r"""
import os, random, resource, signal, sys, hashlib
from krea_ops.runbook.audit import AuditLog
path, gen, seed, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if limit >= 0:
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the kernel's default
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
rng = random.Random(seed)
log = AuditLog(path)
seq = 0
while True:
    pad = rng.randbytes(rng.randrange(32 * 1024, 512 * 1024)).hex()
    sha = hashlib.sha256(pad.encode()).hexdigest()
    log.append({"gen": gen, "seq": seq, "record": "step", "sha": sha, "pad": pad})
    print(gen, seq, flush=True)
    seq += 1
"""

KILLS = 30
HEAD = re.compile(rb'^\{"gen":(\d+),"seq":(\d+),')


def parse(data: bytes) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The file as a reader that skips unparseable lines sees it: whole records, and the
    lines that did not parse."""
    records, torn = [], []
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            torn.append(line)
    return records, torn


def run_child(path: Path, gen: int, limit: int) -> tuple[int, list[tuple[int, int]]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(gen), str(1000 + gen), str(limit)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    acked: list[tuple[int, int]] = []
    if limit < 0:
        first = proc.stdout.readline()  # the first record is in: the loop is running
        acked.append(tuple(map(int, first.split())))  # type: ignore[arg-type]
        # A seeded moment inside the next few appends: redacting, writing or fsyncing.
        signal_at = random.Random(gen).uniform(0, 0.08)
        try:
            proc.wait(timeout=signal_at)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=120)
    acked += [tuple(map(int, x.split())) for x in rest.splitlines()]  # type: ignore[misc]
    return proc.returncode, acked


def test_every_acknowledged_record_survives_thirty_kills(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    rng = random.Random(17)
    acked_all: set[tuple[int, int]] = set()
    deaths = {"SIGKILL": 0, "SIGXFSZ": 0}
    torn_seen = 0
    torn_by: dict[int, int] = {}
    for gen in range(KILLS):
        before = path.read_bytes() if path.exists() else b""
        # Every other child dies inside a write: its limit falls in its first 1.5 MiB.
        limit = len(before) + rng.randrange(1, 3 * 512 * 1024) if gen % 2 else -1
        code, acked = run_child(path, gen, limit)
        assert code in (-signal.SIGKILL, -signal.SIGXFSZ), code
        deaths["SIGKILL" if code == -signal.SIGKILL else "SIGXFSZ"] += 1
        acked_all.update(acked)

        data = path.read_bytes()
        assert data.startswith(before)  # append-only: nothing earlier changed
        records, torn = parse(data)
        found = {(r["gen"], r["seq"]) for r in records}
        for r in records:  # every whole line is a whole, uncorrupted record
            assert hashlib.sha256(r["pad"].encode()).hexdigest() == r["sha"]
        assert acked_all <= found  # every append that returned is there
        # Each child's records are 0..n-1 with no gap: at most its last one is missing.
        for g in range(gen + 1):
            seqs = sorted(s for gg, s in found if gg == g)
            assert seqs == list(range(len(seqs)))
        # Torn lines: at most one per death, each the head of a record that child never
        # acknowledged, and only ever the last thing that child wrote.
        assert len(torn) <= gen + 1
        for line in torn:
            head = HEAD.match(line)
            if head:
                g, s = int(head[1]), int(head[2])
                assert (g, s) not in acked_all and (g, s + 1) not in found
        if not data.endswith(b"\n"):
            torn_seen += 1
            torn_by[code] = torn_by.get(code, 0) + 1
            assert HEAD.match(data.rsplit(b"\n", 1)[-1]) or len(data.rsplit(b"\n", 1)[-1]) < 40

    print(
        f"deaths {deaths}; torn tails after SIGKILL {torn_by.get(-signal.SIGKILL, 0)}, "
        f"after SIGXFSZ {torn_by.get(-signal.SIGXFSZ, 0)}; {len(acked_all)} records acked"
    )
    # The next writer after all those deaths: its record is a line of its own.
    before = path.read_bytes()
    AuditLog(path).append({"record": "end", "status": "done"})
    data = path.read_bytes()
    assert data.startswith(before)
    assert orjson.loads(data.splitlines()[-1]) == {"record": "end", "status": "done"}
    assert deaths == {"SIGKILL": KILLS // 2, "SIGXFSZ": KILLS // 2}
    # Every file-size death tore a record (the limit falls inside one): the torn tails
    # were there for the next child to start after.
    assert torn_seen >= deaths["SIGXFSZ"]
    assert len(parse(data)[1]) >= deaths["SIGXFSZ"]


def test_a_record_after_a_torn_tail_starts_a_new_line(tmp_path: Path) -> None:
    """Before the fix the next record glued onto the half line, and both were lost to a
    reader: the torn one and the first whole one after the crash."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.append({"record": "start", "run_id": "a"})
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"record":"step","run_id":"a","lines":["cordon')  # a crash, mid-record
    log.append({"record": "start", "run_id": "b"})
    lines = path.read_bytes().split(b"\n")
    assert lines[0] + b"\n" == whole
    assert lines[1] == b'{"record":"step","run_id":"a","lines":["cordon'
    assert orjson.loads(lines[2]) == {"record": "start", "run_id": "b"}
    assert lines[3] == b""
    # The documented reader skips the torn line and sees both runs' records.
    out = subprocess.run(
        ["jq", "-cR", "fromjson? | .run_id"], input=path.read_bytes(), capture_output=True
    )
    assert out.returncode == 0 and out.stdout == b'"a"\n"b"\n'


def test_the_file_is_private_and_only_ever_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "state" / "krea-ops" / "audit.jsonl"
    log = AuditLog(path)
    log.append({"record": "start"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = path.read_bytes()
    ino = path.stat().st_ino
    log.append({"record": "end"})
    assert path.read_bytes().startswith(first) and path.stat().st_ino == ino
