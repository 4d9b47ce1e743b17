"""``krea-ops train launch`` end to end against a simulated world (nodes, kubelets,
scheduler, Kueue, the JobSet/Job controllers, the simulated trainers): the dry-run's
JobSet is accepted by ``kubectl apply --dry-run=server`` (the server validates it against
the real JobSet CRD), the plan is what then runs, Kueue admits the gang and its pods run
with the rendezvous environment, a second identical launch is a no-op, and each refusal
is one line, exit 2, with nothing created."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.main import invoke
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.world import SimWorld
from tests.conftest import KUBECTL, Kubectl, wait_for

PARTS = ("cluster", "kueue")
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "training", "jobsets")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane, nodes=4, speed=60, exporters=False, prometheus=False
    )
    with SimWorld(config, tmp_path_factory.mktemp("world"), parts=PARTS) as w:
        custom = client.CustomObjectsApi(w.client)

        def queue_active() -> bool:
            lqs = custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", "training", "localqueues"
            )["items"]
            conds = [c for lq in lqs for c in (lq.get("status") or {}).get("conditions") or ()]
            return any(c["type"] == "Active" and c["status"] == "True" for c in conds)

        wait_for(queue_active, timeout=60)
        yield w


@pytest.fixture
def env(world: SimWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No config file; the audit log in the test's folder; the pods' /checkpoints mapped
    onto the world's state directory (where the simulated trainers write)."""
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(log))
    mount = f"/checkpoints={world.world.state_dir / 'checkpoints'}"
    monkeypatch.setenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", mount)
    return log


def run(world: SimWorld, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(["train", *args, "--kubeconfig", str(world.kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def jobsets(world: SimWorld) -> dict[str, dict[str, Any]]:
    group, version, ns, plural = JOBSET
    body = client.CustomObjectsApi(world.client).list_namespaced_custom_object(
        group, version, ns, plural
    )
    return {o["metadata"]["name"]: o for o in body["items"]}


def launch_args(name: str, *extra: str) -> list[str]:
    return ["launch", name, "--nodes", "2", "--image", "krea/dit:1.0", *extra]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_dry_run_manifest_is_accepted_by_kubectl_server_dry_run(
    world: SimWorld, env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(world, capsys, *launch_args("dit-dry", "--dry-run", "-o", "yaml"))
    assert code == 0, err
    assert "dit-dry" not in jobsets(world) and not env.exists()
    manifest = yaml.safe_load(out)
    assert manifest["kind"] == "JobSet" and manifest["spec"]["suspend"] is True

    # as text: the plan, one line per call, and the preflight
    code, out_text, err = run(world, capsys, *launch_args("dit-dry", "--dry-run"))
    assert code == 0, err
    lines = out_text.splitlines()
    assert lines[:3] == [
        "Plan: train launch training/dit-dry, by krea-sim-admin",
        "  1. create JobSet training/dit-dry",
        "       POST /apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets  "
        "# the gang, suspended for Kueue to admit",
    ]
    assert "  INFO: the gang fits: 4 healthy schedulable nodes with at least 8 GPUs in " \
        "ClusterQueue training's GPU flavors (h200; telemetry not read)" in lines  # fmt: skip
    assert "dit-dry" not in jobsets(world) and not env.exists()

    kubectl = Kubectl(world.kubeconfig, tmp_path / "home")
    result = kubectl("apply", "--dry-run=server", "-f", "-", stdin=out)
    assert result.stdout.strip() == "jobset.jobset.x-k8s.io/dit-dry created (server dry run)"
    assert "dit-dry" not in jobsets(world)

    # a field the CRD does not have is what the server's validation refuses (not a
    # blanket accept): kubectl's own words for a strict field validation failure
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["bogusField"] = 1
    bad = kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(manifest), check=False
    )
    assert bad.returncode != 0
    assert 'unknown field "spec.replicatedJobs[0].template.spec.bogusField"' in bad.stderr


def test_launch_runs_the_plan_kueue_admits_the_gang_and_it_runs(
    world: SimWorld, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(world, capsys, *launch_args("dit-a", "--arg", "--lr=3e-4"), "--dry-run",
                         "-o", "json")  # fmt: skip
    assert code == 0, err
    dry = json.loads(out)

    code, out, err = run(world, capsys, *launch_args("dit-a", "--arg", "--lr=3e-4"), "--yes",
                         "-o", "json")  # fmt: skip
    assert code == 0, err
    (ran,) = json.loads(out)
    plan, result = ran["plan"], ran["result"]
    assert plan["action"] == "train launch" and plan["subject"] == "training/dit-a"
    planned = [(c["method"], c["path"], c["about"]) for s in plan["steps"] for c in s["calls"]]
    made = [(c["method"], c["path"], c["about"]) for s in result["steps"] for c in s["calls"]]
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets"
    assert planned == made == [("POST", path, "jobset training/dit-a")]
    assert result["status"] == "done" and result["steps"][0]["calls"][0]["http_status"] == 201
    # what --dry-run printed is the body the plan posted (but for when it was made)
    body = plan["steps"][0]["calls"][0]["body"]
    for obj in (dry, body):
        obj["metadata"]["annotations"].pop("krea.ai/launched-at")
    assert dry == body

    js = jobsets(world)["dit-a"]
    meta = js["metadata"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "training"
    # JobSet's exclusive placement would pin every rank to rank 0's node (per child Job).
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in meta["annotations"]
    assert meta["annotations"]["krea.ai/checkpoint-dir"] == "/checkpoints/training/dit-a"
    assert meta["annotations"]["krea.ai/launched-by"] == "krea-sim-admin"
    policy = js["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 10
    assert policy["rules"][0]["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]

    # Kueue admits the gang (unsuspends it) and both pods run, on two different nodes
    core = client.CoreV1Api(world.client)

    def running() -> list[Any] | None:
        pods = core.list_namespaced_pod("training", label_selector="krea.ai/training=dit-a").items
        ok = len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for(running, timeout=90)
    assert jobsets(world)["dit-a"]["spec"]["suspend"] is False
    assert len({p.spec.node_name for p in pods}) == 2
    for pod in pods:
        (c,) = pod.spec.containers
        values = {e.name: e.value for e in c.env}
        assert values["MASTER_ADDR"] == "dit-a-trainer-0-0.dit-a"
        assert (values["MASTER_PORT"], values["NNODES"], values["WORLD_SIZE"]) == (
            "29500", "2", "16"
        )  # fmt: skip
        (rank,) = [e for e in c.env if e.name == "NODE_RANK"]
        assert rank.value_from.field_ref.field_path == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
        assert c.args[-1] == "--lr=3e-4" and c.resources.requests == {"nvidia.com/gpu": "8"}

    # audited: who, the plan, each step, the end
    records = [json.loads(line) for line in env.read_text().splitlines()]
    assert [r["record"] for r in records] == ["start", "step", "end"]
    assert {r["user"] for r in records} == {"krea-sim-admin"}
    assert records[-1]["status"] == "done"

    # the same launch again: a no-op (exit 0, nothing written)
    version = jobsets(world)["dit-a"]["metadata"]["resourceVersion"]
    code, out, err = run(world, capsys, *launch_args("dit-a", "--arg", "--lr=3e-4"), "--yes")
    assert code == 0, err
    assert "nothing to do: it is already as asked" in out
    assert "JobSet training/dit-a exists, launched as asked" in out
    again = [json.loads(line) for line in env.read_text().splitlines()][3:]
    assert [r["record"] for r in again] == ["start", "end"]  # audited, no step
    after = jobsets(world)["dit-a"]["metadata"]
    assert after["uid"] == meta["uid"]
    assert after["annotations"]["krea.ai/launch-hash"] == meta["annotations"]["krea.ai/launch-hash"]
    del version

    # the same name with other options: refused, one line, nothing changed
    code, out, err = run(world, capsys, "launch", "dit-a", "--nodes", "1", "--image", "x:1",
                         "--yes")  # fmt: skip
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: JobSet training/dit-a exists and was not launched with these options "
        "(krea-ops train resume dit-a relaunches a finished run; delete it to launch anew); "
        "nothing was created"
    ]
    assert jobsets(world)["dit-a"]["metadata"]["uid"] == meta["uid"]


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ("--queue", "nope"),
            "no LocalQueue training/nope (krea-ops queue list shows the queues); "
            "nothing was created",
        ),
        (
            ("--priority", "urgent"),
            "no WorkloadPriorityClass urgent (--priority); nothing was created",
        ),
        (
            ("--nodes", "5"),
            "a gang of 5 nodes x 8 GPUs cannot run: 4 healthy schedulable nodes with at least "
            "8 GPUs in ClusterQueue training's GPU flavors (h200; telemetry not read); "
            "nothing was created",
        ),
        (
            ("--gpus-per-node", "9"),
            "a gang of 2 nodes x 9 GPUs cannot run: 0 healthy schedulable nodes with at least "
            "9 GPUs in ClusterQueue training's GPU flavors (h200; telemetry not read); "
            "nothing was created",
        ),
        (
            ("--resume-from", "latest"),
            "--resume-from latest: no complete checkpoint under /checkpoints/training/"
            "dit-refused (WORLD/checkpoints/training/dit-refused); nothing was created",
        ),
    ],
)
def test_refusals_are_one_line_exit_2_and_create_nothing(
    world: SimWorld,
    env: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    line: str,
) -> None:
    code, out, err = run(world, capsys, *launch_args("dit-refused"), *extra, "--yes")
    assert (code, out) == (2, "")
    line = line.replace("WORLD", str(world.world.state_dir))
    assert err.strip().splitlines() == [f"error: {line}"]
    assert "dit-refused" not in jobsets(world) and not env.exists()


def test_a_missing_checkpoint_dir_or_a_file_is_refused(
    world: SimWorld, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = world.world.state_dir / "checkpoints" / "training"
    root.mkdir(parents=True, exist_ok=True)
    (root / "a-file").write_text("not a directory")
    code, out, err = run(world, capsys, *launch_args("dit-refused"), "--checkpoint-dir",
                         "/checkpoints/training/missing", "--yes")  # fmt: skip
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        f"error: --checkpoint-dir /checkpoints/training/missing: {root / 'missing'} does not "
        "exist here (checked through training_checkpoint_mount); nothing was created"
    ]
    code, out, err = run(world, capsys, *launch_args("dit-refused"), "--checkpoint-dir",
                         "/checkpoints/training/a-file", "--yes")  # fmt: skip
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        f"error: --checkpoint-dir /checkpoints/training/a-file: {root / 'a-file'} is not a "
        "directory; nothing was created"
    ]
    assert "dit-refused" not in jobsets(world) and not env.exists()


def test_right_after_start_the_gang_cannot_run_yet_because_no_node_has_a_reading(
    world: SimWorld,
) -> None:
    """Found: ``train launch`` right after start said the gang "cannot run: 0 healthy
    schedulable nodes" while no telemetry had arrived: say that the nodes' health is not
    known yet, and that the gang would fit them."""
    from krea_ops.errors import BadInput
    from krea_ops.kube.cluster import Cluster
    from krea_ops.model import Severity
    from krea_ops.runbook.training import plan_launch
    from krea_ops.training.manifests import TrainingSpec

    cluster = Cluster(world.client, timeout_s=30)
    spec = TrainingSpec("dit-early", 2, "krea/dit:1.0", namespace="training")
    # telemetry read, and no node in it yet: every node's verdict is UNKNOWN
    no_reading = {n.name: Severity.UNKNOWN for n in cluster.nodes()}
    with pytest.raises(BadInput) as refused:
        plan_launch(cluster, spec, user="op", node_severity=no_reading)
    assert str(refused.value) == (
        "a gang of 2 nodes x 8 GPUs cannot run yet: 0 healthy schedulable nodes with at least "
        "8 GPUs in ClusterQueue training's GPU flavors (h200; by telemetry too), and 4 more "
        "whose health is not known yet (no reading from their exporters: just started, not "
        "scraped yet, or down; krea-ops nodes list says which); nothing was created"
    )
    # one node read BAD, the rest not yet: the gang of 4 cannot run at all
    one_bad = {**no_reading, "gpu-node-000": Severity.BAD}
    spec4 = TrainingSpec("dit-early", 4, "krea/dit:1.0", namespace="training")
    with pytest.raises(BadInput, match=r"^a gang of 4 nodes x 8 GPUs cannot run: 0 healthy"):
        plan_launch(cluster, spec4, user="op", node_severity=one_bad)
