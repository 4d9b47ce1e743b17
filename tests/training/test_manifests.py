"""The launch manifest as data: what ``train resume`` reads back from it, the launch hash
that makes a second identical launch a no-op, and the names JobSet would refuse."""

from __future__ import annotations

import dataclasses

import pytest

from krea_ops.errors import BadInput
from krea_ops.training.manifests import TrainingSpec, launch_hash, spec_of, training_jobset


def spec(**options: object) -> TrainingSpec:
    base: dict[str, object] = {"name": "dit-xl", "nodes": 16, "image": "reg/dit:7"}
    return TrainingSpec(**{**base, **options})  # type: ignore[arg-type]


def test_spec_reads_back_from_the_jobset() -> None:
    asked = spec(
        queue="research",
        priority="high",
        checkpoint_dir="/ckpt/dit-xl",
        resume_from="/ckpt/dit-xl/step-900",
        args=("--lr=1e-4", "--batch=4096"),
        gpus_per_node=4,
        max_restarts=3,
    )
    js = training_jobset(asked, launched_by="ana", launched_at="2026-12-02T01:00:00Z")
    assert spec_of(js) == asked
    plain = spec()
    assert spec_of(training_jobset(plain)) == dataclasses.replace(
        plain, checkpoint_dir="/checkpoints/training/dit-xl"
    )


def test_the_hash_covers_what_was_asked_not_who_or_when() -> None:
    a = training_jobset(spec(), launched_by="ana", launched_at="2026-12-02T01:00:00Z")
    b = training_jobset(spec(), launched_by="bo", launched_at="2026-12-03T01:00:00Z")
    assert launch_hash(a) == launch_hash(b) is not None
    assert launch_hash(training_jobset(spec(nodes=15))) != launch_hash(a)
    assert launch_hash(training_jobset(spec(args=("--lr=2",)))) != launch_hash(a)
    assert launch_hash({"metadata": {}}) is None


def test_disruptions_restart_the_gang_without_counting() -> None:
    js = training_jobset(spec())
    assert js["spec"]["failurePolicy"] == {
        "maxRestarts": 10,
        "rules": [
            {
                "name": "disruption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"] == {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    counted = training_jobset(spec(disruptions_free=False))
    assert counted["spec"]["failurePolicy"] == {"maxRestarts": 10}
    assert "podFailurePolicy" not in counted["spec"]["replicatedJobs"][0]["template"]["spec"]


@pytest.mark.parametrize("name", ["Dit", "9dit", "dit_xl", "dit-", "d" * 41, ""])
def test_names_jobset_would_refuse_are_refused(name: str) -> None:
    with pytest.raises(BadInput, match="training name"):
        training_jobset(spec(name=name))


@pytest.mark.parametrize(
    ("options", "line"),
    [
        ({"nodes": 0}, "--nodes 0: a training needs at least one node"),
        ({"gpus_per_node": 0}, "--gpus-per-node 0: give at least one GPU"),
        ({"image": ""}, "--image: name the trainer's container image"),
    ],
)
def test_shapes_that_are_no_training(options: dict[str, object], line: str) -> None:
    with pytest.raises(BadInput) as refused:
        training_jobset(spec(**options))
    assert str(refused.value) == line
