"""Validation: the Job's manifest and script, the reading of its log, the pool's baselines,
and the plans that start a validation and record its result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from krea_ops.errors import BadInput
from krea_ops.runbook.plan import StepKind
from krea_ops.runbook.validate import ValidateInputs, build_record, build_validate, outcome
from krea_ops.settings import Settings
from krea_ops.validation import (
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Baselines,
    Check,
    Validation,
    ValidationSpec,
    job_manifest,
    job_name,
    judge,
    pool_baselines,
    script,
    sections,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "validation"
SPEC = ValidationSpec.from_settings(Settings())
NOMINAL = pool_baselines([], SPEC)
NOW = 1_790_000_000.0


def _node(name: str = "gpu-node-007", gpus: int = 8, **extra: object) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "41"}
    meta.update(extra)
    return {
        "metadata": meta,
        "spec": {"unschedulable": True},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_full_log_fails_the_hot_gpu_and_the_dead_port_with_figures() -> None:
    log = (FIXTURES / "full-fail.log").read_text()
    v = judge("gpu-node-007", "full", log, NOMINAL, SPEC, at=NOW, job="krea-ops/j")
    by = {c.name: c for c in v.checks}
    assert not v.passed
    assert v.failed() == ["dcgm", "nccl", "ib/mlx5_1"]
    # the failing DCGM test, its GPU and its warning, with the word the table cut mended
    assert "Targeted Power (GPU: 3)" in by["dcgm"].detail
    assert "Thermal violations totaling 14.2 seconds started" in by["dcgm"].detail
    # the bus bandwidth at the largest size, not the average over every size
    assert by["nccl"].figure == pytest.approx(354.95)
    assert by["nccl"].baseline == SPEC.nccl_busbw_gbps and by["nccl"].baseline_from == "nominal"
    assert "under 405.0" in by["nccl"].detail
    assert by["ib/mlx5_0"].passed and by["ib/mlx5_0"].figure == pytest.approx(392.31)
    assert by["ib/mlx5_1"].detail == "Couldn't connect to localhost:18515"
    assert v.summary().startswith("fail (full): dcgm failed Targeted Power")


def test_a_cut_log_fails_the_checks_that_never_ran() -> None:
    log = (FIXTURES / "full-fail.log").read_text()
    cut = log[: log.index("=== nccl")]
    v = judge("n", "full", cut, NOMINAL, SPEC, at=NOW)
    by = {c.name: c.detail for c in v.checks}
    assert by["nccl"] == "did not run"
    assert by["ib"] == "no InfiniBand port was tested"


def test_the_pool_median_replaces_the_nominal_figure_from_three_passes() -> None:
    def passed(node: str, busbw: float) -> Validation:
        return Validation(node, "quick", NOW, (Check("dcgm", True, "ok"),
                          Check("nccl", True, "ok", busbw, "GB/s")))  # fmt: skip

    two = pool_baselines([passed("a", 300.0), passed("b", 310.0)], SPEC)
    assert two.nccl_from == "nominal"
    three = pool_baselines([passed("a", 300.0), passed("b", 310.0), passed("c", 320.0)], SPEC)
    assert (three.nccl_busbw_gbps, three.nccl_from) == (310.0, "pool median of 3")
    # against that pool, 354.95 GB/s passes
    log = (FIXTURES / "full-fail.log").read_text()
    v = judge("n", "quick", log, three, SPEC, at=NOW)
    assert {c.name: c.passed for c in v.checks}["nccl"]


def test_the_script_marks_each_section_and_is_valid_bash(tmp_path: Path) -> None:
    text = script("full", SPEC, 8)
    assert "dcgmi diag -r 3" in text and "all_reduce_perf -b 8 -e 8G -f 2 -g 8" in text
    assert "ib_write_bw -d ${dev}" in text
    assert "ib_write_bw" not in script("quick", SPEC, 8)
    assert "dcgmi diag -r 2" in script("quick", SPEC, 8)
    # run it with the tools as stand-ins that print nothing and fail: the marks come out,
    # and the script exits 1
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dcgmi", "all_reduce_perf", "ib_write_bw"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 3\n")
        (bin_dir / tool).chmod(0o755)
    ib = tmp_path / "ib"
    (ib / "mlx5_0").mkdir(parents=True)
    text = text.replace("/sys/class/infiniband", str(ib)).replace("sleep 2", "true")
    out = subprocess.run(
        ["bash", "-c", text],
        capture_output=True,
        text=True,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "NODE_NAME": "n1",
            "KREA_VALIDATION_LEVEL": "full",
        },
        check=False,
    )
    assert out.returncode == 1
    parts = sections(out.stdout)
    assert list(parts) == ["dcgm", "nccl", "ib/mlx5_0"]
    assert all(p.exit_code == 3 for p in parts.values())
    assert out.stdout.splitlines()[0] == "krea-ops validation full on n1"
    assert out.stdout.splitlines()[-1] == "=== done"


def test_the_job_is_pinned_tolerant_exclusive_and_never_preempts() -> None:
    job = job_manifest("gpu-node-007", "quick", 8, SPEC, user="alice", reason="after swap", now=NOW)
    pod = job["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-node-007"]
    keys = {t["key"] for t in pod["tolerations"]}
    assert {"krea.ai/unhealthy", PENDING_TAINT_KEY, "node.kubernetes.io/unschedulable"} <= keys
    assert all(t["effect"] == "NoSchedule" for t in pod["tolerations"])
    assert pod["priorityClassName"] == "krea-ops-validation"
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert job["metadata"]["annotations"]["krea.ai/reason"] == "after swap"


def test_job_names_stay_within_63_characters() -> None:
    long = "gpu-node-" + "x" * 80
    name = job_name(long, "full", NOW)
    assert len(name) <= 63 and name.startswith("krea-validate-gpu-node-x")
    assert job_name(long, "full", NOW) != job_name(long + "y", "full", NOW)


def _inputs(pods: list[dict[str, object]] | None = None, jobs: int = 0) -> ValidateInputs:
    running = [
        {
            "metadata": {
                "namespace": "krea-ops",
                "name": f"v{i}",
                "annotations": {"krea.ai/validation-node": f"other-{i}"},
            },
            "status": {},
        }
        for i in range(jobs)
    ]
    return ValidateInputs(
        {"gpu-node-007": _node()}, {"gpu-node-007": pods or []}, running, 64, True
    )


def test_the_plan_creates_the_job_and_an_event() -> None:
    plan = build_validate(
        _inputs(), ["gpu-node-007"], "full", SPEC, user="alice", reason=None, now=NOW
    )
    assert [s.kind for s in plan.steps] == [StepKind.CREATE, StepKind.EVENT]
    call = plan.steps[0].calls[0]
    assert (call.method, call.path) == ("POST", "/apis/batch/v1/namespaces/krea-ops/jobs")
    assert plan.options["jobs"] == {"gpu-node-007": f"krea-ops/{call.body['metadata']['name']}"}
    assert plan.refused is None


def test_a_node_with_a_trainings_pods_is_refused() -> None:
    rank = {
        "metadata": {
            "namespace": "ml",
            "name": "dit-0",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "dit"},
        },
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"},
    }
    with pytest.raises(BadInput, match="holds pods of training ml/dit"):
        build_validate(
            _inputs([rank]), ["gpu-node-007"], "quick", SPEC, user="a", reason=None, now=NOW
        )


def test_more_validations_than_the_share_are_refused() -> None:
    # 5% of 64 GPU nodes: 3 at once; 3 already running
    plan = build_validate(
        _inputs(jobs=3), ["gpu-node-007"], "quick", SPEC, user="a", reason=None, now=NOW
    )
    assert plan.refused is not None and "validation_share" in plan.refused


def test_recording_a_failure_labels_and_a_pass_clears_and_untaints() -> None:
    failed = Validation(
        "gpu-node-007", "quick", NOW, (Check("nccl", False, "slow"),), "krea-ops/j1"
    )
    plan = build_record(_node(), failed, user="node-health")
    patch = plan.steps[0].calls[0].body
    assert patch["metadata"]["labels"] == {NEEDS_REPAIR_LABEL: "nccl"}
    assert json.loads(patch["metadata"]["annotations"][RESULT_ANNOTATION])["result"] == "fail"
    assert patch["metadata"]["resourceVersion"] == "41"
    assert plan.steps[1].event is not None and plan.steps[1].event.warning
    # recorded already: nothing to do
    node = _node(
        annotations={RESULT_ANNOTATION: failed.annotation()},
        labels={NEEDS_REPAIR_LABEL: "nccl", "krea.ai/pool": "h100"},
    )
    assert build_record(node, failed, user="node-health").steps == ()
    passed = Validation(
        "gpu-node-007", "quick", NOW + 60, (Check("nccl", True, "ok"),), "krea-ops/j2"
    )
    node["spec"] = {
        "taints": [{"key": PENDING_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}]
    }
    plan = build_record(node, passed, user="node-health")
    body = plan.steps[0].calls[0].body
    assert body["metadata"]["labels"] == {NEEDS_REPAIR_LABEL: None}
    assert "taints" in body["spec"]  # the pending taint removed
    assert plan.steps[1].event is not None and not plan.steps[1].event.warning


def test_a_job_that_ended_without_a_log_fails_saying_so() -> None:
    job = {
        "metadata": {
            "namespace": "krea-ops",
            "name": "j",
            "annotations": {"krea.ai/validation-node": "n"},
            "labels": {"krea.ai/validation-level": "quick"},
        },
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
        },
    }
    v = outcome(job, None, None, Baselines(450, "nominal", 390, "nominal"), SPEC, at=NOW)
    assert not v.passed
    assert v.checks[0].detail == "Job Failed (DeadlineExceeded) with no log (no pod ran)"
