"""The manifests that run the exporter in a cluster: least privilege, and alert rules that fire."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT, require_binary

DEPLOY = ROOT / "deploy"


def _docs(directory: Path) -> list[dict]:
    docs = []
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
