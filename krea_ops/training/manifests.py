"""The JobSet a DiT pre-training is launched as (``train launch``, ``train resume``).

One replicated job ``trainer`` of N Indexed pods, one per node because each asks for
all the node's GPUs; created suspended with Kueue's ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class`` labels, so Kueue admits the gang whole or not at all.

Failures: ``backoffLimit: 0`` fails the Job on any pod failure and the JobSet restarts
every pod (``failurePolicy.maxRestarts``): a rank cannot rejoin a running collective. A
disruption (an eviction, a drained or lost node: the pod's ``DisruptionTarget``
condition) is not the trainer's fault, so it must not use up ``maxRestarts``: the Job's
``podFailurePolicy`` fails the Job at once on it (reason ``PodFailurePolicy``) and the
JobSet's rule ``RestartJobSetAndIgnoreMaxRestarts`` on that reason restarts the gang
without counting it, JobSet's own host-maintenance pattern. (An ``Ignore`` rule alone
would only replace the disrupted pod, and the other ranks would hang in their collective
until NCCL's timeout.)

Placement: no ``alpha.jobset.sigs.k8s.io/exclusive-topology``. JobSet's exclusive
placement is per child Job: its pod webhook gives the Job's leader pod a pod affinity to
the Job's own pods in the topology domain and pins every follower to the leader's domain
(``setNodeSelector`` in pkg/webhooks/pod_webhook.go), so on ``kubernetes.io/hostname`` it
puts all N pods of our one Job on one node: rank 0 runs, the other ranks never schedule.
(Found on the upstream control plane; our simulated JobSet never implemented it.) The
pods require nodes not labelled ``krea.ai/lemon=true`` (a node remediated
twice within 28 days, labelled by the node-health controller until an operator clears
it): a lemon still serves inference, but no gang.

Rendezvous (torchrun's environment): ``MASTER_ADDR`` is pod 0 of job 0 through the
JobSet's headless service, ``<jobset>-<rjob>-0-0.<jobset>``; ``NODE_RANK`` is the Job's
completion index; ``WORLD_SIZE`` the GPUs of the gang, ``NNODES`` its nodes.

Our annotations on the JobSet say what ``train resume`` and ``train list`` need:
``krea.ai/checkpoint-dir`` (the path inside the pods), ``krea.ai/resume-from`` (the
checkpoint this launch starts from), ``krea.ai/launched-by``/``launched-at`` and
``krea.ai/launch-hash`` (the spec's hash: a second identical launch is a no-op).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from krea_ops.errors import BadInput
from krea_ops.training.runs import CHECKPOINT_DIR_ANNOTATION, RESUME_FROM_ANNOTATION

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
WORKLOAD_LABEL = "krea.ai/workload"
TRAINING_LABEL = "krea.ai/training"
LAUNCHED_BY = "krea.ai/launched-by"
LAUNCHED_AT = "krea.ai/launched-at"
LAUNCH_HASH = "krea.ai/launch-hash"
IMAGE_ANNOTATION = "krea.ai/image"
REPLICATED_JOB = "trainer"
MASTER_PORT = 29500
DEFAULT_NAMESPACE = "training"
DEFAULT_QUEUE = "training"
DEFAULT_PRIORITY = "training"
DEFAULT_MAX_RESTARTS = 10
DISRUPTION_RULE = "disruption"
# a node the node-health controller found remediated too often (controllers.node_health):
# a gang on it would restart again, so training pods require nodes without it
LEMON_LABEL = "krea.ai/lemon"


def default_checkpoint_dir(namespace: str, name: str) -> str:
    """Where a run's checkpoints go inside the pods when none is named."""
    return f"/checkpoints/{namespace}/{name}"


@dataclass(frozen=True)
class TrainingSpec:
    """What a launch asks for. ``disruptions_free``: a disruption restarts the gang
    without counting towards ``max_restarts`` (see the module's docstring)."""

    name: str
    nodes: int
    image: str
    namespace: str = DEFAULT_NAMESPACE
    gpus_per_node: int = 8
    queue: str = DEFAULT_QUEUE
    priority: str = DEFAULT_PRIORITY
    checkpoint_dir: str | None = None
    resume_from: str | None = None
    args: tuple[str, ...] = ()
    max_restarts: int = DEFAULT_MAX_RESTARTS
    disruptions_free: bool = True
    module: str = "krea.dit.train"
    extra_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoints(self) -> str:
        return self.checkpoint_dir or default_checkpoint_dir(self.namespace, self.name)

    @property
    def master_addr(self) -> str:
        return f"{self.name}-{REPLICATED_JOB}-0-0.{self.name}"

    def validate(self) -> None:
        if self.nodes < 1:
            raise BadInput(f"--nodes {self.nodes}: a training needs at least one node")
        if self.gpus_per_node < 1:
            raise BadInput(f"--gpus-per-node {self.gpus_per_node}: give at least one GPU")
        if not self.image:
            raise BadInput("--image: name the trainer's container image")
        # pods are <name>-trainer-0-<index>-<5 chars>: JobSet's webhook
        # (pkg/webhooks/jobset_webhook.go) refuses a JobSet whose longest pod name is no
        # DNS-1035 label (63 characters, a lower-case letter first, '-' inside)
        ok = self.name[:1].isalpha() and not self.name.endswith("-")
        ok = ok and all(ch.isdigit() or "a" <= ch <= "z" or ch == "-" for ch in self.name)
        if len(self.name) > 40 or not ok:
            raise BadInput(
                f"training name {self.name!r}: lower-case letters, digits and '-', starting "
                "with a letter, at most 40 characters"
            )


def _hash(manifest: dict[str, Any]) -> str:
    raw = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def training_jobset(
    spec: TrainingSpec, *, launched_by: str | None = None, launched_at: str | None = None
) -> dict[str, Any]:
    """The JobSet of ``spec`` (see the module's docstring); BadInput when the spec is
    not one."""
    spec.validate()
    ckpt = spec.checkpoints
    pod_labels = {WORKLOAD_LABEL: "training", TRAINING_LABEL: spec.name}
    trainer_args = [
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.gpus_per_node}",
        "--node-rank=$(NODE_RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        "-m",
        spec.module,
        "--checkpoint-dir",
        ckpt,
    ]
    env: list[dict[str, Any]] = [
        {"name": "MASTER_ADDR", "value": spec.master_addr},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "NNODES", "value": str(spec.nodes)},
        {"name": "WORLD_SIZE", "value": str(spec.nodes * spec.gpus_per_node)},
        {
            "name": "NODE_RANK",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        },
        {"name": "CHECKPOINT_DIR", "value": ckpt},
    ]
    annotations: dict[str, str] = {CHECKPOINT_DIR_ANNOTATION: ckpt, IMAGE_ANNOTATION: spec.image}
    if spec.resume_from:
        trainer_args += ["--resume-from", spec.resume_from]
        env.append({"name": "RESUME_FROM", "value": spec.resume_from})
        annotations[RESUME_FROM_ANNOTATION] = spec.resume_from
    trainer_args += list(spec.args)
    annotations.update(spec.extra_annotations)
    gpus = str(spec.gpus_per_node)
    failure_policy: dict[str, Any] = {"maxRestarts": spec.max_restarts}
    job_spec: dict[str, Any] = {
        "parallelism": spec.nodes,
        "completions": spec.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
    }
    if spec.disruptions_free:
        failure_policy["rules"] = [
            {
                "name": DISRUPTION_RULE,
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ]
        job_spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        }
    job_spec["template"] = {
        "metadata": {"labels": dict(pod_labels)},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": spec.image,
                    "command": ["torchrun"],
                    "args": trainer_args,
                    "env": env,
                    "resources": {
                        "requests": {"nvidia.com/gpu": gpus},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                }
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": LEMON_LABEL, "operator": "NotIn", "values": ["true"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    }
    manifest: dict[str, Any] = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": {
                QUEUE_LABEL: spec.queue,
                PRIORITY_LABEL: spec.priority,
                WORKLOAD_LABEL: "training",
            },
            "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "failurePolicy": failure_policy,
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {"metadata": {"labels": dict(pod_labels)}, "spec": job_spec},
                }
            ],
        },
    }
    # the hash covers what was asked, not who asked or when
    annotations[LAUNCH_HASH] = _hash(manifest)
    if launched_by:
        annotations[LAUNCHED_BY] = launched_by
    if launched_at:
        annotations[LAUNCHED_AT] = launched_at
    return manifest


def launch_hash(obj: dict[str, Any]) -> str | None:
    """The ``krea.ai/launch-hash`` a JobSet was created with (None: not launched by us)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAUNCH_HASH)
    return str(value) if value else None


def spec_of(obj: dict[str, Any]) -> TrainingSpec:
    """The launch spec a JobSet of ours was built from (what ``train resume`` relaunches
    with another resume target); BadInput when it is not a training JobSet of ours."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    what = f"JobSet {meta.get('namespace')}/{meta.get('name')}"
    rjobs = (obj.get("spec") or {}).get("replicatedJobs") or []
    if labels.get(WORKLOAD_LABEL) != "training" or CHECKPOINT_DIR_ANNOTATION not in annotations:
        raise BadInput(f"{what} was not launched by krea-ops train launch (no krea.ai/ marks)")
    if len(rjobs) != 1 or rjobs[0].get("name") != REPLICATED_JOB:
        raise BadInput(f"{what} does not have the one replicated job {REPLICATED_JOB!r}")
    job = (rjobs[0].get("template") or {}).get("spec") or {}
    pod = (job.get("template") or {}).get("spec") or {}
    (container,) = [c for c in pod.get("containers") or () if c.get("name") == "trainer"] or [{}]
    args = list(container.get("args") or ())
    # what follows the trainer's own flags is the operator's --arg list
    extra: list[str] = []
    if "--checkpoint-dir" in args:
        rest = args[args.index("--checkpoint-dir") + 2 :]
        if rest[:1] == ["--resume-from"]:
            rest = rest[2:]
        extra = rest
    module = args[args.index("-m") + 1] if "-m" in args else "krea.dit.train"
    gpus = ((container.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", "8")
    policy = (obj.get("spec") or {}).get("failurePolicy") or {}
    return TrainingSpec(
        name=str(meta.get("name")),
        nodes=int(job.get("parallelism") or 1),
        image=str(container.get("image") or annotations.get(IMAGE_ANNOTATION) or ""),
        namespace=str(meta.get("namespace")),
        gpus_per_node=int(gpus),
        queue=str(labels.get(QUEUE_LABEL) or DEFAULT_QUEUE),
        priority=str(labels.get(PRIORITY_LABEL) or DEFAULT_PRIORITY),
        checkpoint_dir=str(annotations[CHECKPOINT_DIR_ANNOTATION]),
        resume_from=annotations.get(RESUME_FROM_ANNOTATION),
        args=tuple(extra),
        max_restarts=int(policy.get("maxRestarts", DEFAULT_MAX_RESTARTS)),
        disruptions_free=bool(policy.get("rules")),
        module=module,
    )
