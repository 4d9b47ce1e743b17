"""Node validation: the Job that proves a node's GPUs, NVLink and InfiniBand sound before it
serves again, and the reading of that Job's log into pass or fail per check. Pure: no I/O.

The checks, by level (``quick`` | ``full``):

* ``dcgm``: NVIDIA's DCGM diagnostics, ``dcgmi diag -r 2`` (quick) or ``-r 3`` (full). The
  table it prints is read row by row: a test whose result starts ``Fail`` fails the check,
  with the GPUs it names and the ``Warning`` rows under it.
* ``nccl``: an all-reduce across the node's GPUs (nccl-tests' ``all_reduce_perf``). The
  figure is the out-of-place bus bandwidth at the largest size, in GB/s; the check fails
  below ``nccl_min_ratio`` of the pool's baseline, on any ``#wrong`` result or
  out-of-bounds value, or when the test prints no result.
* ``ib/<device>`` (full only): each InfiniBand port's RDMA write bandwidth, perftest's
  ``ib_write_bw`` in loopback (a server and a client on the port, as Azure's node health
  checks run it), in Gb/s, against ``ib_min_ratio`` of the pool's baseline.

The pool's baseline is the median of the figures of passing validations of nodes in the
same pool (``krea.ai/pool``), read from their ``krea.ai/validation`` annotations, when at
least ``BASELINE_MIN_SAMPLES`` are there; otherwise the nominal figure of the settings. The
result says which.

The script (``script``) marks each section with a line the parser splits on: ``=== dcgm:
<command>``, ``=== nccl: <command>``, ``=== ib <device>: <command>``, each followed by the
tool's output and ``=== exit <code>``, then ``=== done``. A section missing from the log (the
pod was killed, the log was cut) fails its check with ``did not run``.

Where the result is kept: the node's ``krea.ai/validation`` annotation (JSON, the latest
result), its ``krea.ai/needs-repair`` label (the failing checks, while the last validation
failed), an Event, and the audit log. A node that joins the pool carries the taint
``krea.ai/validation=pending:NoSchedule`` (set by its kubelet's ``--register-with-taints``)
until its first pass removes it.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from krea_ops.settings import Settings

LEVELS = ("quick", "full")
DCGM_RUN_LEVEL = {"quick": 2, "full": 3}

APP = "krea-ops-validation"
APP_LABEL = "app.kubernetes.io/name"
NODE_LABEL = "krea.ai/validation-node"
LEVEL_LABEL = "krea.ai/validation-level"
NODE_ANNOTATION = "krea.ai/validation-node"  # the whole name (a label value is cut at 63)
RESULT_ANNOTATION = "krea.ai/validation"
NEEDS_REPAIR_LABEL = "krea.ai/needs-repair"
PENDING_TAINT_KEY = "krea.ai/validation"
PENDING_TAINT_VALUE = "pending"
PENDING_TAINT_EFFECT = "NoSchedule"
PRIORITY_CLASS = "krea-ops-validation"
CONTAINER = "validate"
MARK = "=== "
BASELINE_MIN_SAMPLES = 3
# Taints a validation pod tolerates: our quarantine, the pending-validation taint, a
# cordon, and the GPU taint many clusters put on GPU nodes. Never the NoExecute taints of
# an unreachable or not-ready node: a pod there would not run.
TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "krea.ai/unhealthy", "operator": "Exists", "effect": "NoSchedule"},
    {"key": PENDING_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass(frozen=True)
class ValidationSpec:
    """What a validation runs, from the ``validation_*`` settings."""

    image: str
    namespace: str
    timeout_s: float
    dcgm_command: str  # {run_level}
    nccl_command: str  # {gpus}
    ib_command: str  # {device}; the client adds the host
    nccl_min_ratio: float
    ib_min_ratio: float
    nccl_busbw_gbps: float  # nominal, GB/s
    ib_gbps: float  # nominal, Gb/s
    share: float  # of GPU nodes validating at once (at least one)

    @staticmethod
    def from_settings(settings: Settings) -> ValidationSpec:
        return ValidationSpec(
            image=settings.validation_image,
            namespace=settings.validation_namespace,
            timeout_s=settings.validation_timeout_s,
            dcgm_command=settings.validation_dcgm_command,
            nccl_command=settings.validation_nccl_command,
            ib_command=settings.validation_ib_command,
            nccl_min_ratio=settings.validation_nccl_min_ratio,
            ib_min_ratio=settings.validation_ib_min_ratio,
            nccl_busbw_gbps=settings.validation_nccl_busbw_gbps,
            ib_gbps=settings.validation_ib_gbps,
            share=settings.validation_share,
        )

    def at_once(self, gpu_nodes: int) -> int:
        """How many nodes may validate at once: the share of the GPU nodes, at least one."""
        return max(1, int(self.share * gpu_nodes))


def check_level(level: str) -> str:
    if level not in LEVELS:
        from krea_ops.errors import BadInput

        raise BadInput(f"--level {level!r}: use quick or full")
    return level


# -- the Job ---------------------------------------------------------------------------------


def script(level: str, spec: ValidationSpec, gpus: int) -> str:
    """The validation container's shell script: each tool in its marked section. Exits 1
    when a tool exits non-zero (the Job then reads Failed), 0 otherwise; the verdict is
    the parse of its log, which also judges the figures."""
    dcgm = spec.dcgm_command.format(run_level=DCGM_RUN_LEVEL[level])
    nccl = spec.nccl_command.format(gpus=gpus)
    lines = [
        "set -u",
        "rc=0",
        'echo "krea-ops validation ${KREA_VALIDATION_LEVEL} on ${NODE_NAME}"',
        f'echo "{MARK}dcgm: {dcgm}"',
        dcgm,
        f'code=$?; echo "{MARK}exit $code"; [ "$code" -eq 0 ] || rc=1',
        f'echo "{MARK}nccl: {nccl}"',
        nccl,
        f'code=$?; echo "{MARK}exit $code"; [ "$code" -eq 0 ] || rc=1',
    ]
    if level == "full":
        ib = spec.ib_command.format(device="${dev}")
        lines += [
            "for dev in $(ls /sys/class/infiniband); do",
            f'  echo "{MARK}ib ${{dev}}: {ib} localhost"',
            f"  {ib} >/dev/null 2>&1 &",
            "  server=$!",
            "  sleep 2",
            f"  {ib} localhost",
            f'  code=$?; echo "{MARK}exit $code"; [ "$code" -eq 0 ] || rc=1',
            '  wait "$server"',
            "done",
        ]
    lines += [f'echo "{MARK}done"', 'exit "$rc"']
    return "\n".join(lines) + "\n"


def job_name(node: str, level: str, now: float) -> str:
    """``krea-validate-<node>-<level>-<yymmddhhmmss>``, the node cut (with a hash of the
    whole name) so the name stays within 63 characters (its pods' ``job-name`` label)."""
    stamp = time.strftime("%y%m%d%H%M%S", time.gmtime(now))
    tail = f"-{level}-{stamp}"
    head = "krea-validate-"
    room = 63 - len(head) - len(tail)
    short = node if len(node) <= room else (
        node[: room - 7].rstrip("-.") + "-" + hashlib.sha256(node.encode()).hexdigest()[:6]
    )  # fmt: skip
    return f"{head}{short}{tail}".lower()


def label_value(text: str) -> str:
    """A label value for ``text``: at most 63 characters, ending alphanumeric."""
    return text[:63].rstrip("-._")


def job_manifest(
    node: str,
    level: str,
    gpus: int,
    spec: ValidationSpec,
    *,
    user: str,
    reason: str | None,
    now: float,
) -> dict[str, Any]:
    """The validation Job for ``node``: one pod pinned to it (node affinity on
    ``metadata.name``, as a DaemonSet's), tolerating our quarantine, the pending
    validation taint and a cordon, holding every GPU of the node (so it runs alone on
    them), at the ``krea-ops-validation`` PriorityClass (low, ``preemptionPolicy: Never``:
    it never preempts anything), never retried, cut at the timeout."""
    labels = {
        APP_LABEL: APP,
        "app.kubernetes.io/managed-by": "krea-ops",
        NODE_LABEL: label_value(node),
        LEVEL_LABEL: level,
    }
    annotations = {NODE_ANNOTATION: node, "krea.ai/requested-by": user}
    if reason:
        annotations["krea.ai/reason"] = reason
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus > 0 else {}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "priorityClassName": PRIORITY_CLASS,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [dict(t) for t in TOLERATIONS],
        "containers": [
            {
                "name": CONTAINER,
                "image": spec.image,
                "command": ["/bin/bash", "-c", script(level, spec, gpus)],
                "env": [
                    {"name": "KREA_VALIDATION_LEVEL", "value": level},
                    {
                        "name": "NODE_NAME",
                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                    },
                ],
                "resources": {"limits": gpu, "requests": gpu},
                "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "IPC_LOCK"]}},
                "volumeMounts": [{"name": "infiniband", "mountPath": "/dev/infiniband"}],
            }
        ],
        "volumes": [{"name": "infiniband", "hostPath": {"path": "/dev/infiniband"}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(node, level, now),
            "namespace": spec.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(spec.timeout_s),
            "ttlSecondsAfterFinished": 7 * 86400,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One check's outcome. ``figure``/``baseline`` in ``unit`` (None where the check has
    none); ``baseline_from``: ``pool median of N`` or ``nominal``."""

    name: str  # dcgm, nccl, ib/mlx5_0
    passed: bool
    detail: str
    figure: float | None = None
    unit: str | None = None
    baseline: float | None = None
    baseline_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "passed": self.passed, "detail": self.detail}
        if self.figure is not None:
            out.update(figure=round(self.figure, 2), unit=self.unit)
        if self.baseline is not None:
            out.update(baseline=round(self.baseline, 2), baseline_from=self.baseline_from)
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Check:
        def num(key: str) -> float | None:
            v = data.get(key)
            return float(v) if isinstance(v, (int, float)) else None

        return Check(
            name=str(data.get("name") or "?"),
            passed=bool(data.get("passed")),
            detail=str(data.get("detail") or ""),
            figure=num("figure"),
            unit=str(data["unit"]) if data.get("unit") else None,
            baseline=num("baseline"),
            baseline_from=str(data["baseline_from"]) if data.get("baseline_from") else None,
        )


@dataclass(frozen=True)
class Validation:
    """One validation of one node: pass when every check passed."""

    node: str
    level: str
    at: float  # when it was judged (Unix seconds)
    checks: tuple[Check, ...]
    job: str | None = None  # namespace/name
    by: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def result(self) -> str:
        return "pass" if self.passed else "fail"

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    def summary(self) -> str:
        """One line: ``pass (quick): dcgm ok; nccl 472.1 GB/s (baseline 470.0)`` or the
        failing checks first."""
        parts = [_check_words(c) for c in sorted(self.checks, key=lambda c: c.passed)]
        return f"{self.result} ({self.level}): " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "level": self.level,
            "at": round(self.at, 3),
            "result": self.result,
            "failed": self.failed(),
            "checks": [c.as_dict() for c in self.checks],
            "job": self.job,
            "by": self.by,
        }

    def annotation(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_annotation(node: str, text: str | None) -> Validation | None:
        """The result a node's ``krea.ai/validation`` annotation holds; None for none or
        one that does not parse (someone edited it by hand)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return Validation(
                node=node,
                level=str(data.get("level") or "?"),
                at=float(data["at"]),
                checks=tuple(Check.from_dict(c) for c in data.get("checks") or ()),
                job=data.get("job"),
                by=data.get("by"),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def _check_words(c: Check) -> str:
    if c.figure is not None and c.baseline is not None:
        figure = f"{c.figure:.1f} {c.unit} (baseline {c.baseline:.1f}, {c.baseline_from})"
        return f"{c.name} {figure}" + ("" if c.passed else f": {c.detail}")
    return f"{c.name} {'ok' if c.passed else c.detail}"


def needs_repair_value(v: Validation) -> str:
    """The ``krea.ai/needs-repair`` label value: the failing checks, dot-separated
    (``dcgm.nccl``, ``ib-mlx5_1``), cut to a valid label value."""
    names = [re.sub(r"[^A-Za-z0-9_.-]", "-", n) for n in v.failed()]
    return label_value(".".join(names) or "validation")


# -- baselines -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baselines:
    nccl_busbw_gbps: float
    nccl_from: str
    ib_gbps: float
    ib_from: str


def pool_baselines(results: Iterable[Validation], spec: ValidationSpec) -> Baselines:
    """The pool's baselines from the passing results of its nodes (the latest per node):
    the median figure when at least ``BASELINE_MIN_SAMPLES`` are there, else nominal."""
    nccl: list[float] = []
    ib: list[float] = []
    for v in results:
        if not v.passed:
            continue
        for c in v.checks:
            if c.figure is None:
                continue
            if c.name == "nccl":
                nccl.append(c.figure)
            elif c.name.startswith("ib/"):
                ib.append(c.figure)

    def pick(values: list[float], nominal: float) -> tuple[float, str]:
        if len(values) >= BASELINE_MIN_SAMPLES:
            return statistics.median(values), f"pool median of {len(values)}"
        return nominal, "nominal"

    n, n_from = pick(nccl, spec.nccl_busbw_gbps)
    i, i_from = pick(ib, spec.ib_gbps)
    return Baselines(n, n_from, i, i_from)


# -- reading the log -------------------------------------------------------------------------


@dataclass
class Section:
    name: str  # dcgm, nccl, ib/<device>
    command: str
    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None


_SECTION = re.compile(r"^=== (dcgm|nccl|ib (\S+)): (.*)$")
_EXIT = re.compile(r"^=== exit (-?\d+)\s*$")


def sections(log: str) -> dict[str, Section]:
    """The log split at the script's marks, by check name."""
    out: dict[str, Section] = {}
    current: Section | None = None
    for raw in log.splitlines():
        line = raw.rstrip("\r")
        m = _SECTION.match(line)
        if m:
            name = f"ib/{m.group(2)}" if m.group(2) else m.group(1)
            current = out[name] = Section(name, m.group(3))
            continue
        m = _EXIT.match(line)
        if m and current is not None:
            current.exit_code = int(m.group(1))
            current = None
            continue
        if current is not None:
            current.lines.append(line)
    return out


def _first_error(lines: Sequence[str]) -> str:
    for line in lines:
        text = line.strip()
        if text and re.search(r"error|fail|couldn't|unable|cannot|abort|\bdown\b", text, re.I):
            return text[:200]
    return "no result in its output"


_ROW = re.compile(r"^\|([^|]*)\|([^|]*)\|\s*$")
_RESULT = re.compile(r"^(Pass|Fail|Skip|Warn)\b", re.I)
# DCGM cuts a long cell every 45 characters, mid-word too, each piece after one space
DCGM_CELL = 45


def _piece(raw: str) -> str:
    """A cell's text as DCGM wrote it: a full piece keeps its trailing spaces."""
    text = raw[1:] if raw.startswith(" ") else raw
    return text[:DCGM_CELL] if len(text) > DCGM_CELL else text.rstrip()


def judge_dcgm(section: Section) -> Check:
    """``dcgmi diag``'s table: every test row's result; a ``Fail`` row fails the check with
    the GPUs it names and the ``Warning`` rows that follow it. A test that passes on some
    GPUs and fails on others takes two rows, the second with an empty first cell
    (``| Targeted Power | Pass - GPUs: 0, 1, 2 |`` then ``|  | Fail - GPU: 3 |``). A
    diagnostic that exits non-zero with no failing row it names fails too."""
    failed: list[str] = []
    warnings: list[str] = []
    tests = 0
    test = ""  # the test the rows belong to
    in_warning = False  # a Warning row and its continuations
    for line in section.lines:
        m = _ROW.match(line)
        if not m:
            continue
        name, raw = m.group(1).strip(), m.group(2)
        value = raw.strip()
        if name in ("Warning", "Info"):
            in_warning = name == "Warning"
            if in_warning:
                warnings.append(_piece(raw))
            continue
        r = _RESULT.match(value)
        if not name and in_warning and warnings and not r:
            warnings[-1] += _piece(raw)
            continue
        in_warning = False
        if not r:
            continue
        if name:
            test = name
            tests += 1
        elif not test:
            continue
        if r.group(1).lower() == "fail":
            gpus = value.split("-", 1)[1].strip() if "-" in value else ""
            failed.append(f"{test} ({gpus})" if gpus else test)
    code = section.exit_code
    if not tests:
        return Check("dcgm", False, _first_error(section.lines))
    if failed:
        detail = "failed " + ", ".join(failed)
        if warnings:
            detail += ": " + " ".join(" ".join(w.split()) for w in warnings)[:300]
        return Check("dcgm", False, detail)
    if code not in (None, 0):
        return Check("dcgm", False, f"dcgmi exited {code} with no failing test named")
    return Check("dcgm", True, f"{tests} tests passed")


_NCCL_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s*$"
)
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(\d+)")


def _against(figure: float, unit: str, baseline: float, min_ratio: float) -> tuple[bool, str]:
    """Whether ``figure`` clears ``min_ratio`` of the baseline, and the words for it."""
    floor = min_ratio * baseline
    if figure < floor:
        return False, f"{figure:.1f} {unit}, under {floor:.1f} ({min_ratio:.0%} of the baseline)"
    return True, f"{figure:.1f} {unit}"


def judge_nccl(section: Section, baselines: Baselines, min_ratio: float) -> Check:
    """``all_reduce_perf``'s table: the out-of-place bus bandwidth at the largest size
    against the baseline; any wrong result or out-of-bounds value fails."""
    rows: list[tuple[int, float, int]] = []
    oob = 0
    for line in section.lines:
        m = _NCCL_ROW.match(line)
        if m:
            wrong = sum(int(x) for x in (m.group(6), m.group(10)) if x.isdigit())
            rows.append((int(m.group(1)), float(m.group(5)), wrong))
            continue
        m = _OOB.match(line)
        if m:
            oob = int(m.group(1))
    base, source = baselines.nccl_busbw_gbps, baselines.nccl_from
    if not rows:
        return Check("nccl", False, _first_error(section.lines), None, "GB/s", base, source)
    size, busbw, _ = max(rows)
    wrong = sum(w for _, _, w in rows)
    if wrong or oob:
        detail = f"{wrong} wrong results, {oob} out of bounds"
        return Check("nccl", False, detail, busbw, "GB/s", base, source)
    passed, words = _against(busbw, "GB/s", base, min_ratio)
    detail = f"bus bandwidth {words} at {size} B"
    return Check("nccl", passed, detail, busbw, "GB/s", base, source)


_IB_HEADER = re.compile(r"BW average\[Gb/sec\]")
_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def judge_ib(section: Section, baselines: Baselines, min_ratio: float) -> Check:
    """``ib_write_bw``'s result row (after its ``BW average[Gb/sec]`` header): the average
    bandwidth against the baseline."""
    average: float | None = None
    seen_header = False
    for line in section.lines:
        if _IB_HEADER.search(line):
            seen_header = True
            continue
        m = _IB_ROW.match(line) if seen_header else None
        if m:
            average = float(m.group(4))
    base, source = baselines.ib_gbps, baselines.ib_from
    if average is None:
        return Check(section.name, False, _first_error(section.lines), None, "Gb/s", base, source)
    passed, words = _against(average, "Gb/s", base, min_ratio)
    return Check(section.name, passed, f"RDMA write {words}", average, "Gb/s", base, source)


def judge(
    node: str,
    level: str,
    log: str,
    baselines: Baselines,
    spec: ValidationSpec,
    *,
    at: float,
    job: str | None = None,
    by: str | None = None,
) -> Validation:
    """The validation's result from its pod's log."""
    parts = sections(log)
    checks: list[Check] = []
    dcgm = parts.get("dcgm")
    checks.append(judge_dcgm(dcgm) if dcgm else Check("dcgm", False, "did not run"))
    nccl = parts.get("nccl")
    checks.append(
        judge_nccl(nccl, baselines, spec.nccl_min_ratio)
        if nccl
        else Check("nccl", False, "did not run")
    )
    if level == "full":
        ports = sorted(n for n in parts if n.startswith("ib/"))
        if not ports:
            checks.append(Check("ib", False, "no InfiniBand port was tested"))
        checks += [judge_ib(parts[p], baselines, spec.ib_min_ratio) for p in ports]
    return Validation(node, level, at, tuple(checks), job, by)
