"""One settings object: defaults, then a YAML file, then ``KREA_OPS_*`` env, then flags.

Every field is documented in its ``metadata["help"]``; ``krea-ops version -o yaml`` and
``docs/operations.md`` list them. The file is ``$KREA_OPS_CONFIG`` or
``~/.config/krea-ops/config.yaml`` when it exists.

A file that is not UTF-8 YAML, an unknown setting, or a value that is not of its
setting's type (floats must be finite: ``nan`` or ``.inf`` are refused) is one
``BadInput`` line; a setting given with no value keeps its default.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from krea_ops.errors import BadInput

ENV_PREFIX = "KREA_OPS_"
GPU_BACKENDS = ("nvml", "none", "fake")  # exporter_gpu_backend
# Settings that are URLs, and the flag that sets each (for the message that names it).
URL_SETTINGS = {"prometheus_url": "--prometheus"}
# Settings set by a flag of another name: an error about the value names the flag typed.
FLAG_NAMES = {
    **URL_SETTINGS,
    "exporter_nvml_call_timeout_s": "--nvml-timeout",
    "exporter_gpu_scrape_timeout_s": "--gpu-scrape-timeout",
}


def _doc(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = field(
        default=None, metadata=_doc("kubeconfig path; default $KUBECONFIG, ~/.kube/config")
    )
    context: str | None = field(default=None, metadata=_doc("kubeconfig context to use"))
    prometheus_url: str | None = field(
        default=None,
        metadata=_doc("Prometheus base URL; default the cluster's krea-ops-config ConfigMap"),
    )
    debug: bool = field(default=False, metadata=_doc("show tracebacks on errors"))
    exporter_listen: str = field(
        default="127.0.0.1:9400", metadata=_doc("exporter HTTP address (loopback by default)")
    )
    exporter_sysfs: str = field(default="/sys", metadata=_doc("sysfs root for InfiniBand"))
    exporter_gpu_backend: str = field(
        default="nvml", metadata=_doc("GPU backend: nvml, none, or fake (simulated H200s)")
    )
    exporter_node_name: str | None = field(
        default=None, metadata=_doc("value of the node label; default $NODE_NAME, hostname")
    )
    exporter_gpm_interval_s: float = field(
        default=1.0, metadata=_doc("GPM (tensor activity) sampling interval, seconds")
    )
    exporter_xid_window_s: float = field(
        default=600.0, metadata=_doc("how long the last XID stays exported, seconds")
    )
    exporter_fake_gpus: int = field(
        default=8, metadata=_doc("number of simulated GPUs for --gpu-backend fake")
    )
    exporter_nvml_call_timeout_s: float = field(
        default=5.0,
        metadata=_doc("an NVML call running this long marks its GPU timed out, seconds"),
    )
    exporter_gpu_scrape_timeout_s: float = field(
        default=8.0, metadata=_doc("longest wait for all GPUs' readings in one scrape, seconds")
    )
    # --- telemetry (krea_ops/telemetry) ---
    telemetry_window_s: float = field(
        default=300.0,
        metadata=_doc("window for counter rates and sustained temperature, seconds"),
    )
    telemetry_stale_s: float = field(
        default=120.0,
        metadata=_doc("a node's readings older than this are unknown, not healthy, seconds"),
    )
    telemetry_timeout_s: float = field(
        default=10.0, metadata=_doc("timeout of one Prometheus query or exporter scrape, s")
    )
    telemetry_scrape_gap_s: float = field(
        default=1.0,
        metadata=_doc("without Prometheus: gap between the two direct scrapes rates need, s"),
    )
    # --- training (krea_ops/training) ---
    training_checkpoint_mount: str | None = field(
        default=None,
        metadata=_doc("where the pods' checkpoint volume is mounted here: REMOTE=LOCAL"),
    )
    training_checkpoint_seconds: float = field(
        default=30.0, metadata=_doc("checkpoint write time for the interval advice, seconds")
    )
    training_failures_per_1000_node_days: float = field(
        default=6.5, metadata=_doc("failure rate for the interval advice (Llama 3: 6.5)")
    )
    training_grace_s: float = field(
        default=300.0,
        metadata=_doc("a run is not judged HUNG or STRAGGLER this long after a start or resume, s"),
    )
    training_hang_floor_s: float = field(
        default=180.0,
        metadata=_doc("HUNG: no new step for at least this long (and training_hang_steps), s"),
    )
    training_hang_steps: float = field(
        default=10.0,
        metadata=_doc("HUNG: no new step for this many times the run's step time (and the floor)"),
    )
    training_hang_busy_min: float = field(
        default=0.9, metadata=_doc("HUNG: the gang's GPUs at least this busy on average, 0-1")
    )
    training_hang_tensor_max: float = field(
        default=0.1,
        metadata=_doc("HUNG: the gang's tensor activity at most this on average, 0-1"),
    )
    training_straggler_ratio: float = field(
        default=1.1,
        metadata=_doc("STRAGGLER/SLOW: step time now at least this times the run's baseline"),
    )
    training_wait_ratio: float = field(
        default=1.25,
        metadata=_doc(
            "STRAGGLER without step-time evidence: a GPU whose clocks stand out, with this "
            "many times the tensor activity of the rest of its gang (they wait for it)"
        ),
    )
    training_clock_ratio: float = field(
        default=0.9,
        metadata=_doc(
            "a busy GPU under this share of its maximum SM clock and of the gang's median "
            "stands out"
        ),
    )
    training_hot_margin_c: float = field(
        default=8.0,
        metadata=_doc("a GPU this many °C above its gang's median temperature stands out"),
    )
    training_recent_s: float = field(
        default=120.0, metadata=_doc("the step time now is measured over this long, seconds")
    )
    training_baseline_window_s: float = field(
        default=1800.0,
        metadata=_doc("a run's baseline step time: the median over this long before now, s"),
    )
    # --- dashboard (screens/) ---
    dashboard_refresh_s: float = field(
        default=5.0, metadata=_doc("dashboard refresh interval, seconds")
    )
    dashboard_read_only: bool = field(
        default=False, metadata=_doc("hide every action in the dashboard")
    )
    # --- runbook (krea_ops/runbook) ---
    max_share: float = field(
        default=0.1,
        metadata=_doc(
            "share of the fleet one write action may take offline, 0-1 (flag --max-share); "
            "one node is always allowed"
        ),
    )
    audit_log: str | None = field(
        default=None,
        metadata=_doc(
            "append-only JSON-lines audit log of every write action; default "
            "$XDG_STATE_HOME/krea-ops/audit.jsonl, else ~/.local/state/krea-ops/audit.jsonl"
        ),
    )
    # --- controllers (krea_ops/controllers) ---
    controller_watch: bool = field(
        default=True,
        metadata=_doc(
            "controllers: read nodes, pods, Jobs, JobSets and Kueue's objects through watch "
            "caches (one list-and-watch per kind for every controller of the process); "
            "false: list them every pass"
        ),
    )
    controller_watch_resync_s: float = field(
        default=3600.0,
        metadata=_doc(
            "controllers: the watch caches relist this often as a safety net, seconds "
            "(0: never; a watch that ends is resumed, a 410 Gone relists)"
        ),
    )
    burst_taint_free_gpus_high: int = field(
        default=16,
        metadata=_doc(
            "burst-taint: taint the virtual nodes when more healthy in-cluster GPUs than "
            "this have been free for burst_taint_hold_s"
        ),
    )
    burst_taint_free_gpus_low: int = field(
        default=8,
        metadata=_doc(
            "burst-taint: remove the taint when fewer than this have been free for "
            "burst_taint_hold_s"
        ),
    )
    burst_taint_hold_s: float = field(
        default=300.0,
        metadata=_doc("burst-taint: how long a threshold must hold before it acts, seconds"),
    )
    node_health_cap_share: float = field(
        default=0.02,
        metadata=_doc(
            "node-health: blast cap, the share of GPU nodes automation may hold quarantined "
            "without an acknowledgement (with node_health_cap_min_nodes, the larger counts)"
        ),
    )
    node_health_cap_min_nodes: int = field(
        default=1, metadata=_doc("node-health: blast cap in nodes, at least this many")
    )
    node_health_veto_nodes: int = field(
        default=3,
        metadata=_doc(
            "node-health: the same finding first seen on this many nodes within "
            "node_health_veto_window_s vetoes evictions for it (one alert instead)"
        ),
    )
    node_health_veto_share: float = field(
        default=0.01,
        metadata=_doc(
            "node-health: or on this share of GPU nodes, whichever is fewer (at least 2)"
        ),
    )
    node_health_veto_window_s: float = field(
        default=60.0, metadata=_doc("node-health: the veto's window, seconds")
    )
    node_health_restore_after_s: float = field(
        default=3600.0,
        metadata=_doc(
            "node-health without validation (node_health_validate false): a node it "
            "quarantined that reads OK this long is restored, seconds (0: never automatically)"
        ),
    )
    node_health_validate: bool = field(
        default=True,
        metadata=_doc(
            "node-health: a node it quarantined earns its way back by a validation Job (the "
            "repair ladder); false: restored after node_health_restore_after_s OK"
        ),
    )
    node_health_validate_after_s: float = field(
        default=600.0,
        metadata=_doc("node-health: a quarantined node is validated after this cool-down, s"),
    )
    node_health_validate_retry_s: float = field(
        default=1800.0,
        metadata=_doc("node-health: a node that failed validation is validated again after, s"),
    )
    node_health_validate_level: str = field(
        default="full", metadata=_doc("node-health: the validation level, quick or full")
    )
    node_health_escalate_after: int = field(
        default=3,
        metadata=_doc(
            "node-health: after this many failed validations a node is escalated (Event "
            "NodeNeedsRepair, alert) and no longer validated automatically"
        ),
    )
    node_health_auto_restore: bool = field(
        default=True,
        metadata=_doc(
            "node-health: restore a node that passed validation (false: report it ready to restore)"
        ),
    )
    node_health_validate_new_nodes: bool = field(
        default=True,
        metadata=_doc(
            "node-health: validate nodes that join with the taint "
            "krea.ai/validation=pending:NoSchedule, and remove it on a pass"
        ),
    )
    node_health_cooldown_s: float = field(
        default=21600.0,
        metadata=_doc(
            "node-health: after an operator's restore the node is not evicted again for "
            "this long, seconds"
        ),
    )
    node_health_lemon_window_s: float = field(
        default=2419200.0,
        metadata=_doc("node-health: evictions within this window count towards a lemon, s"),
    )
    node_health_lemon_remediations: int = field(
        default=2,
        metadata=_doc(
            "node-health: this many evictions within the window label the node "
            "krea.ai/lemon=true (kept out of training placement)"
        ),
    )
    node_health_lemon_restarts: int = field(
        default=2,
        metadata=_doc(
            "node-health: this many training restarts attributed to a node within the lemon "
            "window label it krea.ai/lemon=true"
        ),
    )
    node_health_lemon_same_fault_s: float = field(
        default=3600.0,
        metadata=_doc(
            "node-health: restarts attributed to one node within this long of each other "
            "count once towards a lemon (one fault, not yet pulled), s"
        ),
    )
    node_health_lemon_chance: float = field(
        default=0.01,
        metadata=_doc(
            "node-health: a node needs as many restarts (or evictions) in the lemon window "
            "as fewer than this many ordinary nodes of the fleet would reach by chance at "
            "the fleet's own rate (never fewer than the counts above)"
        ),
    )
    attribution_before_s: float = field(
        default=720.0,
        metadata=_doc(
            "crash attribution: signals this long before a training restart count (NCCL's "
            "10-minute timeout and a margin), s"
        ),
    )
    attribution_after_s: float = field(
        default=300.0,
        metadata=_doc("crash attribution: signals this long after a training restart count, s"),
    )
    node_health_drain_timeout_s: float = field(
        default=300.0, metadata=_doc("node-health: its evictions' --timeout, seconds")
    )
    node_health_planned_swaps: bool = field(
        default=True,
        metadata=_doc(
            "node-health: planned swaps, a node of a running training gang SUSPECT with a "
            "slow-burning finding is evicted right after a checkpoint it asks the trainer for"
        ),
    )
    node_health_hang_restarts: bool = field(
        default=True,
        metadata=_doc(
            "node-health: restart a training gang HUNG for node_health_hang_restart_after_s "
            "(evict the likely node, else rank 0's pod)"
        ),
    )
    node_health_hang_restart_after_s: float = field(
        default=60.0,
        metadata=_doc("node-health: how long a run is HUNG before it is restarted, seconds"),
    )
    node_health_straggler_swaps: bool = field(
        default=True,
        metadata=_doc(
            "node-health: the node a STRAGGLER run names goes through a planned swap "
            "(checkpoint, then evicted)"
        ),
    )
    node_health_swap_timeout_s: float = field(
        default=600.0,
        metadata=_doc(
            "node-health: a planned swap's checkpoint request unanswered this long is given "
            "up (the SUSPECT node stays), seconds"
        ),
    )
    node_health_swap_after_s: float = field(
        default=900.0,
        metadata=_doc(
            "node-health: a slow burn must show this long before a planned swap asks for a "
            "checkpoint (a GPU above its hot threshold: 1 minute, it turns BAD after the "
            "policy's window), seconds"
        ),
    )
    migrate_back_cluster_per_minute: float = field(
        default=1.0,
        metadata=_doc("migrate-back: pods moved home per minute in the whole cluster (bucket)"),
    )
    migrate_back_namespace_per_minute: float = field(
        default=0.5, metadata=_doc("migrate-back: pods moved home per minute per namespace")
    )
    migrate_back_workload_per_minute: float = field(
        default=0.2, metadata=_doc("migrate-back: pods moved home per minute per workload")
    )
    quota_sync_mode: str = field(
        default="apply",
        metadata=_doc(
            "quota-sync: apply (write nominalQuota) or recommend (gauges and log lines only)"
        ),
    )
    quota_sync_training_share: float = field(
        default=0.75,
        metadata=_doc(
            "quota-sync: ClusterQueue training's share of flavor h200's schedulable GPUs, "
            "inference the rest (1: training alone is managed)"
        ),
    )
    quota_sync_headroom_gpus: int = field(
        default=0, metadata=_doc("quota-sync: GPUs per flavor kept out of every quota")
    )
    quota_sync_floor_gpus: int = field(
        default=0, metadata=_doc("quota-sync: no quota is set below this many GPUs")
    )
    quota_sync_ceiling_gpus: int = field(
        default=0, metadata=_doc("quota-sync: no quota is set above this (0: no ceiling)")
    )
    # --- health policy (krea_ops/health.py) ---
    health_hot_c: float = field(
        default=78.0, metadata=_doc("GPU temperature that throttles a run, deg C (BAD)")
    )
    health_warm_c: float = field(
        default=75.0, metadata=_doc("GPU temperature worth a look, deg C (SUSPECT)")
    )
    health_slowdown_margin_c: float = field(
        default=5.0, metadata=_doc("slowdown margin below this is SUSPECT, deg C")
    )
    health_nvlink_errors_bad: float = field(
        default=100.0,
        metadata=_doc("NVLink recovery+CRC errors in the window that make a GPU BAD"),
    )
    health_ib_symbol_errors_bad: float = field(
        default=100.0,
        metadata=_doc("IB symbol/receive errors in the window that make a port BAD"),
    )
    health_xmit_wait_ratio_suspect: float = field(
        default=0.2,
        metadata=_doc("IB xmit wait as a fraction of time that is SUSPECT (congestion)"),
    )
    health_busy_not_work_gap: float = field(
        default=0.3,
        metadata=_doc(
            "busy time minus tensor activity (0-1) from which a GPU, or the fleet, is "
            "marked busy but not doing math"
        ),
    )
    health_activity_skew_ratio: float = field(
        default=0.1,
        metadata=_doc("SM/tensor activity above busy time by more than this is doubtful, 0-1"),
    )
    validation_image: str = field(
        default="ghcr.io/coreweave/nccl-tests:12.4.1-cudnn-devel-ubuntu22.04-nccl2.21.5-1-85f9143",
        metadata=_doc(
            "image of the validation Job: it must carry dcgmi, nccl-tests' all_reduce_perf "
            "and perftest's ib_write_bw"
        ),
    )
    validation_namespace: str = field(
        default="krea-ops", metadata=_doc("namespace the validation Jobs run in")
    )
    validation_timeout_s: float = field(
        default=3600.0,
        metadata=_doc("a validation Job is cut (activeDeadlineSeconds) and judged failed after, s"),
    )
    validation_dcgm_command: str = field(
        default="dcgmi diag -r {run_level}",
        metadata=_doc("DCGM diagnostics command; {run_level} is 2 (quick) or 3 (full)"),
    )
    validation_nccl_command: str = field(
        default="all_reduce_perf -b 8 -e 8G -f 2 -g {gpus}",
        metadata=_doc("NCCL all-reduce across the node's GPUs; {gpus} is their count"),
    )
    validation_ib_command: str = field(
        default="ib_write_bw -d {device} -F --report_gbits -D 10",
        metadata=_doc(
            "InfiniBand bandwidth per port (full): run as a server, then as its client with "
            "localhost added; {device} is the port's device (mlx5_0)"
        ),
    )
    validation_nccl_min_ratio: float = field(
        default=0.9, metadata=_doc("NCCL bus bandwidth under this share of the baseline fails")
    )
    validation_ib_min_ratio: float = field(
        default=0.9, metadata=_doc("a port's RDMA bandwidth under this share of the baseline fails")
    )
    validation_nccl_busbw_gbps: float = field(
        default=450.0,
        metadata=_doc(
            "nominal all-reduce bus bandwidth of a node, GB/s (the baseline until a pool has "
            "3 passing validations)"
        ),
    )
    validation_ib_gbps: float = field(
        default=390.0,
        metadata=_doc("nominal RDMA write bandwidth of a port, Gb/s (NDR 400: ~390)"),
    )
    validation_share: float = field(
        default=0.05,
        metadata=_doc("share of GPU nodes that may run a validation at once (at least one)"),
    )


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get(ENV_PREFIX + "CONFIG")
    if explicit:
        return Path(explicit)
    return Path.home() / ".config" / "krea-ops" / "config.yaml"


def _coerce(name: str, kind: Any, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    text_kind = str(kind)
    try:
        if "bool" in text_kind:
            if isinstance(raw, bool):
                return raw
            low = str(raw).strip().lower()
            if low in {"1", "true", "yes", "on"}:
                return True
            if low in {"0", "false", "no", "off", ""}:
                return False
            raise ValueError(raw)
        if "float" in text_kind:
            number = float(raw)
            if not math.isfinite(number):  # nan compares False: a limit that never holds
                raise ValueError(raw)
            return number
        if "int" in text_kind:
            return int(raw)
        return str(raw)
    except (TypeError, ValueError, OverflowError):  # int(inf), float(10**400)
        raise BadInput(
            f"setting {name} from {source}: {raw!r} is not a valid {text_kind}"
        ) from None


def check_url(value: str, where: str) -> str:
    """``value`` if it is an http(s) URL with a host, else BadInput naming ``where`` and the
    fix. ``localhost:9090`` parses as scheme ``localhost``: without this check it would
    fail later as an unreachable Prometheus (exit 1) instead of as the typo it is (2)."""
    text = value.strip()
    if "://" not in text:
        # the suggestion repeats the text: only when that keeps the message one line
        fix = f": use http://{text}" if text.isprintable() else ""
        raise BadInput(f"{where} {text!r} has no scheme{fix}")
    try:
        parts = urlsplit(text)
        host = parts.hostname
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        raise BadInput(f"{where} {text!r} is not a URL: use http://HOST:PORT") from None
    if parts.scheme not in ("http", "https"):
        raise BadInput(f"{where} {text!r}: the scheme must be http or https")
    if not host:
        raise BadInput(f"{where} {text!r} has no host: use http://HOST:PORT")
    return text


def load_settings(
    overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Merge file, environment and flag overrides (``None`` overrides are ignored)."""
    env = os.environ if env is None else env
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}  # where each value came from, for the error that names it

    path = config_path(env)
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        # a file that is not UTF-8; a YAML int past int()'s 4,300 digits (ValueError);
        # nesting deeper than the parser recurses
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BadInput(f"settings file {path} is not readable YAML: {first}") from None
        if not isinstance(loaded, dict):
            raise BadInput(f"settings file {path} must be a mapping of setting: value")
        for key, raw in loaded.items():
            name = str(key).replace("-", "_")
            if name not in fields:
                raise BadInput(f"settings file {path}: unknown setting {key!r}")
            if raw is None:
                continue  # "max_share:" with no value: the default, not None
            values[name] = _coerce(name, fields[name].type, raw, str(path))
            sources[name] = f"setting {name} in {path}:"

    for name, f in fields.items():
        raw_env = env.get(ENV_PREFIX + name.upper())
        if raw_env is not None:
            values[name] = _coerce(name, f.type, raw_env, ENV_PREFIX + name.upper())
            sources[name] = ENV_PREFIX + name.upper()

    for name, raw in (overrides or {}).items():
        if name not in fields:
            raise KeyError(name)
        if raw is not None:
            values[name] = _coerce(name, fields[name].type, raw, FLAG_NAMES.get(name, "flag"))
            sources[name] = URL_SETTINGS.get(name, "flag")
    for name in URL_SETTINGS:
        if values.get(name):
            values[name] = check_url(values[name], sources[name])
    return Settings(**values)


def describe_settings() -> list[dict[str, str]]:
    """Each setting with its env variable, default and help text (for docs and --help)."""
    rows = []
    for f in dataclasses.fields(Settings):
        rows.append(
            {
                "name": f.name,
                "env": ENV_PREFIX + f.name.upper(),
                "default": repr(f.default),
                "help": f.metadata.get("help", ""),
            }
        )
    return rows
