"""The manifests that run the exporter in a cluster: least privilege, and alert rules that fire."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT, require_binary

DEPLOY = ROOT / "deploy"


def _docs(directory: Path) -> list[dict]:
    docs: list[dict] = []
    for path in sorted(directory.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_exporter_daemonset_runs_with_least_privilege() -> None:
    docs = _docs(DEPLOY / "exporter")
    kinds = {d["kind"] for d in docs}
    # It reads only NVML and /sys on its node: no API permissions at all.
    assert not kinds & {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert sa["automountServiceAccountToken"] is False
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["sys"]["readOnly"] is True
    assert "--sysfs=/host/sys" in container["args"]
    assert not any(a.startswith("--listen=0.0.0.0") for a in container["args"])
    kustomized = yaml.safe_load((DEPLOY / "exporter" / "kustomization.yaml").read_text())
    listed = set(kustomized["resources"])
    on_disk = {p.name for p in (DEPLOY / "exporter").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_alert_rules_are_valid_and_fire_as_tested() -> None:
    promtool = require_binary("promtool")
    rules = DEPLOY / "prometheus"
    check = subprocess.run(
        [promtool, "check", "rules", "krea-ops-rules.yaml"],
        cwd=rules,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(
        [promtool, "test", "rules", "krea-ops-rules.test.yaml"],
        cwd=rules,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert test.returncode == 0, test.stdout + test.stderr


def test_victoriametrics_variant_scrapes_what_the_podmonitors_name() -> None:
    """deploy/victoriametrics: every file parses, the kustomization lists them, and
    vmagent's scrape config keeps the exporter pods' port named ``metrics`` (9400 on the
    DaemonSet) and the controllers', at the PodMonitors' intervals, with the labels the
    Prometheus Operator sets; vmagent writes into the VictoriaMetrics Service."""
    here = DEPLOY / "victoriametrics"
    kustomized = yaml.safe_load((here / "kustomization.yaml").read_text())
    generated = {f for g in kustomized["configMapGenerator"] for f in g["files"]}
    assert generated == {"scrape.yaml"}
    on_disk = {p.name for p in here.glob("*.yaml")} - {"kustomization.yaml", *generated}
    assert set(kustomized["resources"]) == on_disk
    docs = _docs(here)
    objects = [d for d in docs if d.get("kind") not in (None, "Kustomization")]
    assert all(d["metadata"].get("namespace") in ("monitoring", "krea-ops") for d in objects
               if d["kind"] != "Namespace")  # fmt: skip

    scrape = yaml.safe_load((here / "scrape.yaml").read_text())
    jobs = {j["job_name"]: j for j in scrape["scrape_configs"]}
    monitors = {
        d["metadata"]["name"]: d
        for d in (*_docs(DEPLOY / "exporter"), *_docs(DEPLOY / "prometheus-operator"))
        if d["kind"] == "PodMonitor"
    }
    (ds,) = [d for d in _docs(DEPLOY / "exporter") if d["kind"] == "DaemonSet"]
    (port,) = ds["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", 9400)
    for name, monitor in monitors.items():
        job = jobs[f"krea-ops/{name}"]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert job["scrape_interval"] == endpoint["interval"]
        assert job["scrape_timeout"] == endpoint["scrapeTimeout"]
        keeps = {
            tuple(r["source_labels"]): r["regex"]
            for r in job["relabel_configs"]
            if r.get("action") == "keep"
        }
        (app,) = monitor["spec"]["selector"]["matchLabels"].values()
        assert keeps == {
            ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): app,
            ("__meta_kubernetes_pod_container_port_name",): endpoint["port"],
        }
        targets = {r.get("target_label") for r in job["relabel_configs"]}
        assert {"namespace", "pod", "container", "endpoint"} <= targets
        assert job["kubernetes_sd_configs"] == [
            {"role": "pod", "namespaces": {"names": ["krea-ops"]}}
        ]
    # the exporter's job, named as the alerts expect; its targets name their node (a
    # target down past the reads' lookback is known by it) and keep the series' own
    exporter = jobs["krea-ops/krea-ops-exporter"]
    (endpoint,) = monitors["krea-ops-exporter"]["spec"]["podMetricsEndpoints"]
    assert exporter["honor_labels"] is endpoint["honorLabels"] is True
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in (
        exporter["relabel_configs"]
    )
    assert endpoint["relabelings"] == [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node",
        }
    ]

    (vm_svc,) = [d for d in objects if d["kind"] == "Service"]
    (agent,) = [d for d in objects if d["kind"] == "Deployment"]
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    vm_port = vm_svc["spec"]["ports"][0]["port"]
    assert f"-remoteWrite.url=http://victoria-metrics.monitoring.svc:{vm_port}/api/v1/write" in args
    assert "-promscrape.config=/config/scrape.yaml" in args


def test_victoriametrics_scrape_config_loads_into_vmagent() -> None:
    vmagent = require_binary("vmagent")
    check = subprocess.run(
        [vmagent, "-promscrape.config=scrape.yaml", "-promscrape.config.dryRun"],
        cwd=DEPLOY / "victoriametrics",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
