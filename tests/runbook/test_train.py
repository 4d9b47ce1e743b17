"""``train resume`` against a simulated API server: the run is found by our annotations,
the newest *complete* checkpoint is chosen (never the newer step a crash left without
``.metadata``), the plan (delete the finished JobSet, create it again resuming there) is
what the executor does, and an incomplete, corrupt or missing checkpoint, or a run still
running, is refused with the reason and nothing changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import StepKind
from krea_ops.runbook.training import jobset_path, plan_resume
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.training.manifests import TrainingSpec, spec_of, training_jobset
from tests.kube.conftest import create, set_status
from tests.runbook.conftest import cluster, sim
from tests.training.dcp_fixture import write_dcp_checkpoint

__all__ = ["cluster", "sim"]

NS, NAME = "training", "dit"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """What the pods see as /checkpoints, on this machine: the run's directory holds
    complete step-100 and step-200 (real DCP layout), and step-300, the newest, without
    ``.metadata``: the gang crashed while writing it."""
    root = tmp_path / "mnt"
    run = root / NS / NAME
    write_dcp_checkpoint(run / "step-100")
    write_dcp_checkpoint(run / "step-200")
    write_dcp_checkpoint(run / "step-300", commit=False)
    return root


def launched(cluster: Cluster, *, failed: bool = True, **options: Any) -> dict[str, Any]:
    """The run as ``train launch`` made it, and (``failed``) as the JobSet controller
    leaves it when ``maxRestarts`` is spent."""
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    spec = TrainingSpec(NAME, 2, "krea/dit:1.0", namespace=NS, args=("--lr=3e-4",), **options)
    js = create(cluster, jobset_path(NS), training_jobset(spec, launched_by="someone"))
    if failed:
        condition = {
            "type": "Failed",
            "status": "True",
            "reason": "ReachedMaxRestarts",
            "message": "jobset failed due to reaching max number of restarts",
            "lastTransitionTime": "2026-12-01T00:00:00Z",
        }
        js = set_status(cluster, jobset_path(NS, NAME), {"restarts": 10, "conditions": [condition]})
    return js


def mount(tree: Path) -> tuple[str, Path]:
    return ("/checkpoints", tree)


def test_resume_picks_the_newest_complete_checkpoint_and_runs_its_plan(
    cluster: Cluster, tree: Path
) -> None:
    old = launched(cluster)
    plan, manifest = plan_resume(cluster, NAME, namespace=NS, user="op", mount=mount(tree))

    chosen = "/checkpoints/training/dit/step-200"  # not step-300: it has no .metadata
    assert plan.options["checkpoint"] == chosen
    assert [s.kind for s in plan.steps] == [StepKind.REMOVE, StepKind.CREATE]
    delete = plan.steps[0].calls[0]
    assert delete.precondition == f"uid {old['metadata']['uid']}"
    assert "resumes from /checkpoints/training/dit/step-200, the newest complete checkpoint " \
        "(step 200)" in [f.message for f in plan.findings]  # fmt: skip

    result = execute(cluster, plan)
    assert result.status == "done", result.as_dict()
    assert [c.key for c in result.made] == [c.key for c in plan.calls]

    new = cluster.get("jobset", jobset_path(NS, NAME))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["suspend"] is True  # queued for Kueue again
    assert new["metadata"]["annotations"]["krea.ai/resume-from"] == chosen
    (container,) = new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert {"name": "RESUME_FROM", "value": chosen} in container["env"]
    assert container["args"][container["args"].index("--resume-from") + 1] == chosen
    assert container["args"][-1] == "--lr=3e-4"  # the operator's --arg list kept
    # everything else as launched
    before, after = spec_of(old), spec_of(new)
    assert after == TrainingSpec(**{**before.__dict__, "resume_from": chosen})
    assert new["metadata"]["annotations"] == manifest["metadata"]["annotations"]


def test_a_named_checkpoint_must_be_complete(cluster: Cluster, tree: Path) -> None:
    launched(cluster)
    run = tree / NS / NAME
    (run / "step-250").mkdir()
    write_dcp_checkpoint(run / "step-250")
    (run / "step-250" / ".metadata").write_bytes(b"\x80\x04garbage")  # corrupt

    with pytest.raises(BadInput) as incomplete:
        plan_resume(cluster, NAME, namespace=NS, checkpoint="/checkpoints/training/dit/step-300",
                    user="op", mount=mount(tree))  # fmt: skip
    text = str(incomplete.value)
    assert text.startswith(
        "--checkpoint /checkpoints/training/dit/step-300: the checkpoint is incomplete: "
    )
    assert ".metadata" in text and text.endswith("; nothing was changed")

    with pytest.raises(BadInput, match=r"step-250: the checkpoint is incomplete: .*metadata"):
        plan_resume(cluster, NAME, namespace=NS, checkpoint=str(run / "step-250"),
                    user="op", mount=mount(tree))  # fmt: skip

    with pytest.raises(BadInput, match=r"step-999: .* does not exist"):
        plan_resume(cluster, NAME, namespace=NS, checkpoint="/checkpoints/training/dit/step-999",
                    user="op", mount=mount(tree))  # fmt: skip

    # a complete one, named by its local path, is taken as the pods see it
    plan, _ = plan_resume(cluster, NAME, namespace=NS, checkpoint=str(run / "step-100"),
                          user="op", mount=mount(tree))  # fmt: skip
    assert plan.options["checkpoint"] == "/checkpoints/training/dit/step-100"


def test_refusals_leave_the_run_alone(cluster: Cluster, tree: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no training training/dit"):
        plan_resume(cluster, NAME, namespace=NS, user="op", mount=mount(tree))
    js = launched(cluster, failed=False)
    with pytest.raises(BadInput) as running:
        plan_resume(cluster, NAME, namespace=NS, user="op", mount=mount(tree))
    assert str(running.value) == (
        "JobSet training/dit is Suspended: it resumes by itself from its newest complete "
        "checkpoint on its next restart; resume relaunches a Failed or Completed run; "
        "nothing was changed"
    )
    empty = tmp_path / "empty"
    (empty / NS / NAME / "step-300").mkdir(parents=True)  # only a crash's leftover
    set_status(cluster, jobset_path(NS, NAME), {"conditions": [
        {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "x",
         "lastTransitionTime": "2026-12-01T00:00:00Z"}]})  # fmt: skip
    with pytest.raises(BadInput, match="--checkpoint latest: no complete checkpoint under"):
        plan_resume(cluster, NAME, namespace=NS, user="op", mount=mount(empty))
    with pytest.raises(BadInput, match="is not mounted here"):
        plan_resume(cluster, NAME, namespace=NS, user="op", mount=None)
    after = cluster.get("jobset", jobset_path(NS, NAME))
    assert after["metadata"]["uid"] == js["metadata"]["uid"]


def test_cli_resume_dry_run_then_yes(
    sim: LocalApiServer,
    cluster: Cluster,
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(log))
    monkeypatch.setenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", f"/checkpoints={tree}")
    old = launched(cluster)
    kube = ["--kubeconfig", str(sim.kubeconfig)]

    capsys.readouterr()
    assert invoke(["train", "resume", NAME, "--dry-run", *kube]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Plan: train resume training/dit, by krea-sim-admin"
    assert "DELETE /apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets/dit" in out
    assert "step-200" in out and not log.exists()

    # no terminal to confirm on, no --yes: refused, nothing changed
    assert invoke(["train", "resume", NAME, *kube]) == 2
    assert "pass --yes" in capsys.readouterr().err

    assert invoke(["train", "resume", NAME, "--yes", "-o", "json", *kube]) == 0
    (ran,) = json.loads(capsys.readouterr().out)
    assert ran["result"]["status"] == "done"
    new = cluster.get("jobset", jobset_path(NS, NAME))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["annotations"]["krea.ai/resume-from"].endswith("/step-200")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["record"] for r in records] == ["start", "step", "step", "end"]
    assert records[0]["action"] == "train resume" and records[0]["user"] == "krea-sim-admin"
