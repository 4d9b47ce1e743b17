"""The cluster version of VictoriaMetrics as the metrics backend: vminsert, vmstorage, vmselect.

The same exporters, faults and Prometheus as tests/test_victoriametrics.py
(``running_stack``), with Prometheus remote-writing into vminsert
(``/insert/0/prometheus/api/v1/write``, tenant 0) and krea-ops reading vmselect through its
tenant's path prefix (``/select/0/prometheus``): every telemetry read and the read commands
give the same figures as on Prometheus, compared as that test compares them. One vmstorage,
one vminsert and one vmselect, each on loopback ports of its own, data and cache in temp
dirs, stopped after.

The binaries: ``$KREA_OPS_VM_CLUSTER_DIR`` (a directory with ``vmstorage``, ``vminsert``
and ``vmselect``) or PATH. Neither Debian nor the Go module proxy this project builds from
has them: the cluster version lives on the ``cluster`` branch of
github.com/VictoriaMetrics/VictoriaMetrics under ``-cluster`` tags, and the proxy serves
none of those (docs/operations.md, "Metrics on VictoriaMetrics"). From a clone of that
repository they build with ``git checkout v1.150.0-cluster && CGO_ENABLED=0 go build
./app/vmstorage ./app/vminsert ./app/vmselect`` (its dependencies come from the proxy);
the tests pass against those. Without them the differential tests skip, in CI too, with
that reason. The checks of the deploy variant (deploy/victoriametrics/cluster) need no
binary and always run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from commands.main import invoke
from krea_ops.telemetry import PrometheusSource
from tests.conftest import ROOT, free_port, require_binary
from tests.telemetry.conftest import wait_until
from tests.test_victoriametrics import (
    Stack,
    by_identity,
    commands_at_the_pinned_instant,
    differences,
    no_targets_api,  # noqa: F401 (the autouse fixture applies here too)
    pinned,
    read_settings,
    running_stack,
)

PARTS = ("vmstorage", "vminsert", "vmselect")
TENANT = 0
NOT_SERVED = (
    "the cluster version of VictoriaMetrics (vmstorage, vminsert, vmselect) is not "
    "installed: set KREA_OPS_VM_CLUSTER_DIR to a directory with them or put them on PATH. "
    "Debian packages only the single-node version, and the Go module proxy serves no "
    "-cluster tag of github.com/VictoriaMetrics/VictoriaMetrics, so `krea-ops sim upstream "
    "build` cannot build them (from a clone of that repository: git checkout "
    "v1.150.0-cluster && CGO_ENABLED=0 go build ./app/vmstorage ./app/vminsert ./app/vmselect)"
)


def cluster_binaries() -> dict[str, str] | None:
    where = os.environ.get("KREA_OPS_VM_CLUSTER_DIR")
    found = {}
    for part in PARTS:
        path = str(Path(where) / part) if where else shutil.which(part)
        if path is None or not os.access(path, os.X_OK):
            return None
        found[part] = path
    return found


# -- the deploy variant's flags ------------------------------------------------------------

CLUSTER_DEPLOY = ROOT / "deploy" / "victoriametrics" / "cluster"


def _objects(directory: Path) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") != "Kustomization"]


def _args(workload: dict[str, Any]) -> dict[str, str]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(a.lstrip("-").partition("=")[::2] for a in container["args"])


def deployed_flags() -> tuple[int, dict[str, dict[str, str]]]:
    """The vmstorage replicas and each part's flags, as deploy/victoriametrics/cluster
    runs them."""
    objects = {(d["kind"], d["metadata"]["name"]): d for d in _objects(CLUSTER_DEPLOY)}
    storage = objects[("StatefulSet", "vmstorage")]
    flags = {"vmstorage": _args(storage)}
    for part in ("vminsert", "vmselect"):
        flags[part] = _args(objects[("Deployment", part)])
    return int(storage["spec"]["replicas"]), flags


def on_loopback(flags: dict[str, str], **local: str) -> list[str]:
    """The deployed flags with its addresses and paths moved to loopback and a temp dir;
    every flag moved must be one the manifest sets (so a renamed flag fails here)."""
    missing = sorted(set(local) - set(flags))
    assert not missing, f"the manifest no longer sets {missing}"
    return [f"-{k}={v}" for k, v in {**flags, **local}.items()]


class VictoriaMetricsCluster:
    """The deploy variant on loopback: its vmstorage replicas (each with a data dir of its
    own), vminsert writing to all of them with the manifest's replication factor, and
    vmselect reading all of them with the manifest's dedup; every other flag as deployed."""

    def __init__(self, binaries: dict[str, str]) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        # a port picked free may be taken before its process binds (a loaded machine):
        # start them all again on new ones
        for attempt in range(3):
            try:
                self._start(binaries)
                return
            except AssertionError:
                self._stop_procs()
                if attempt == 2:
                    self._tmp.cleanup()
                    raise

    def _start(self, binaries: dict[str, str]) -> None:
        tmp = Path(self._tmp.name)
        replicas, deployed = deployed_flags()
        to_insert = [free_port() for _ in range(replicas)]
        to_select = [free_port() for _ in range(replicas)]
        http: dict[str, int] = {}
        runs: list[tuple[str, str, list[str]]] = []
        for i in range(replicas):
            name = f"vmstorage-{i}"
            http[name] = free_port()
            flags = on_loopback(
                deployed["vmstorage"],
                storageDataPath=str(tmp / name),
                httpListenAddr=f"127.0.0.1:{http[name]}",
                vminsertAddr=f"127.0.0.1:{to_insert[i]}",
                vmselectAddr=f"127.0.0.1:{to_select[i]}",
            )
            runs.append((name, "vmstorage", flags))
        for part, ports, extra in (
            ("vminsert", to_insert, {}),
            ("vmselect", to_select, {"cacheDataPath": str(tmp / "cache")}),
        ):
            http[part] = free_port()
            flags = on_loopback(
                deployed[part],
                httpListenAddr=f"127.0.0.1:{http[part]}",
                storageNode=",".join(f"127.0.0.1:{port}" for port in ports),
                **extra,
            )
            runs.append((part, part, flags))
        for name, part, flags in runs:
            log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 (the child's)
            try:
                proc = subprocess.Popen(
                    [binaries[part], *flags], stdout=log, stderr=subprocess.STDOUT
                )
            finally:
                log.close()
            self.procs.append((name, proc))
        for name, proc in self.procs:

            def healthy(name: str = name, proc: subprocess.Popen[bytes] = proc) -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited: {self.log(name)}")
                try:
                    url = f"http://127.0.0.1:{http[name]}/health"
                    return urllib.request.urlopen(url, timeout=2).status == 200
                except OSError:
                    return False

            wait_until(healthy, timeout=60)
        self.http = http
        self.url = f"http://127.0.0.1:{http['vmselect']}/select/{TENANT}/prometheus"
        self.write_url = (
            f"http://127.0.0.1:{http['vminsert']}/insert/{TENANT}/prometheus/api/v1/write"
        )

    def log(self, part: str) -> str:
        return (Path(self._tmp.name) / f"{part}.log").read_text(errors="replace")[-2000:]

    def _stop_procs(self) -> None:
        for _, proc in reversed(self.procs):  # vmselect, vminsert, then the vmstorages
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)
        self.procs.clear()

    def stop(self) -> None:
        self._stop_procs()
        with contextlib.suppress(OSError):
            self._tmp.cleanup()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip(NOT_SERVED)
    require_binary("prometheus")
    with running_stack(
        tmp_path_factory.mktemp("vm-cluster"), lambda: VictoriaMetricsCluster(binaries)
    ) as made:
        yield made


@pytest.mark.parametrize(
    "read",
    [
        pytest.param({}, id="everything"),
        pytest.param({"families": {"verdicts"}}, id="verdicts-from-summaries"),
        pytest.param({"families": {"ib", "ib_detail", "nvlink", "nvlink_detail"}}, id="fabric"),
    ],
)
def test_every_reading_is_the_same_on_prometheus_and_vmselect(
    stack: Stack, read: dict[str, object]
) -> None:
    assert stack.vm.url.endswith(f"/select/{TENANT}/prometheus")
    on_prom = pinned(stack, stack.prom.url, **read)
    on_vm = pinned(stack, stack.vm.url, **read)
    assert on_prom.errors == () and on_vm.errors == ()
    assert on_prom.nodes and sorted(on_prom.nodes) == sorted(on_vm.nodes)
    assert differences(on_prom, on_vm) == []
    if not read:
        assert on_vm.nodes["gpu-node-001"].gpus[3].temperature_c == 91
        assert on_vm.nodes["gpu-node-001"].gpus[2].xid_last == 79


def test_vmselect_has_no_targets_api_and_a_read_through_it_reports_no_error(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vmselect does not scrape: it answers ``/api/v1/targets`` HTTP 400 "unsupported path
    requested". A read through it gets no failing targets and no error for that (a read
    through Prometheus gets its targets), instead of "targets API failed" on every read."""
    monkeypatch.undo()  # the module's autouse fixture stands in for the targets API
    answer = urllib.request.Request(f"{stack.vm.url}/api/v1/targets")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(answer, timeout=10)
    assert refused.value.code == 400
    assert refused.value.read().startswith(b"unsupported path requested")
    with PrometheusSource(stack.vm.url, read_settings(), clock=stack.clock) as source:
        assert source._targets() == []
        fleet = source.collect()
    assert fleet.errors == () and fleet.nodes
    with PrometheusSource(stack.prom.url, read_settings(), clock=stack.clock) as source:
        assert source._targets(), "Prometheus lists the exporters it scrapes"


def test_every_vmstorage_replica_holds_the_scrapes_as_the_manifest_replicates_them(
    stack: Stack,
) -> None:
    """With the manifest's replication factor equal to its replicas, each vmstorage has
    been sent every row: the equal readings above come through vmselect's dedup, not from
    one replica alone."""
    replicas, deployed = deployed_flags()
    assert int(deployed["vminsert"].get("replicationFactor", "1")) == replicas > 1
    stored = {}
    for i in range(replicas):
        port = stack.vm.http[f"vmstorage-{i}"]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        rows = [
            float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines()
            if line.startswith("vm_vminsert_metrics_read_total")
        ]
        stored[i] = sum(rows)
    assert all(n > 0 for n in stored.values()), stored


def test_the_read_commands_print_the_same_figures_through_vmselect(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpus``, ``fabric``, ``nodes list`` with ``--prometheus`` at Prometheus and at
    vmselect's tenant URL (with a trailing slash, as one is often pasted)."""
    commands_at_the_pinned_instant(stack, monkeypatch)
    for args in (("gpus",), ("fabric",), ("nodes", "list"), ("nodes", "show", "gpu-node-002")):
        printed = []
        for url in (stack.prom.url, f"{stack.vm.url}/"):
            capsys.readouterr()
            kube = ["--kubeconfig", str(stack.api.kubeconfig), "--prometheus", url]
            code = invoke([*kube, *args, "-o", "json"])
            out, err = capsys.readouterr()
            assert code == 0, (args, url, err)
            printed.append(by_identity(json.loads(out)))
        assert printed[0], args
        assert differences(printed[0], printed[1]) == [], args


def test_the_cluster_is_looked_for_where_the_skip_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KREA_OPS_VM_CLUSTER_DIR`` with all three executables is found; one missing is not
    (the module then skips, naming why)."""
    for part in PARTS:
        (tmp_path / part).write_text("#!/bin/sh\n")
        (tmp_path / part).chmod(0o755)
    monkeypatch.setenv("KREA_OPS_VM_CLUSTER_DIR", str(tmp_path))
    assert cluster_binaries() == {p: str(tmp_path / p) for p in PARTS}
    (tmp_path / "vmselect").unlink()
    assert cluster_binaries() is None
    assert "-cluster tag" in NOT_SERVED


# -- the deploy variant --------------------------------------------------------------------


def test_the_cluster_manifests_wire_vminsert_and_vmselect_to_every_vmstorage() -> None:
    """deploy/victoriametrics/cluster: vminsert and vmselect name every vmstorage replica
    at its port for them; replication is within the replicas, and vmselect dedups what it
    replicates; every pod runs as nobody with nothing it does
    not need (no token, no privilege escalation, no capabilities, a read-only root); the
    storage ports admit only vminsert and vmselect."""
    kustomized = yaml.safe_load((CLUSTER_DEPLOY / "kustomization.yaml").read_text())
    local = {p.name for p in CLUSTER_DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert local <= set(kustomized["resources"])
    objects = {(d["kind"], d["metadata"]["name"]): d for d in _objects(CLUSTER_DEPLOY)}
    storage = objects[("StatefulSet", "vmstorage")]
    service = objects[("Service", "vmstorage")]
    assert service["spec"]["clusterIP"] == "None" and storage["spec"]["serviceName"] == "vmstorage"
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    stored = _args(storage)
    assert stored["vminsertAddr"] == f":{ports['vminsert']}"
    assert stored["vmselectAddr"] == f":{ports['vmselect']}"
    replicas = storage["spec"]["replicas"]
    for part, port in (("vminsert", ports["vminsert"]), ("vmselect", ports["vmselect"])):
        args = _args(objects[("Deployment", part)])
        nodes = [f"vmstorage-{i}.vmstorage.monitoring.svc:{port}" for i in range(replicas)]
        assert args["storageNode"].split(",") == nodes, part
        served = objects[("Service", part)]["spec"]["ports"][0]["port"]
        assert args["httpListenAddr"] == f":{served}", part
    factor = int(_args(objects[("Deployment", "vminsert")]).get("replicationFactor", "1"))
    assert 1 <= factor <= replicas
    selecting = _args(objects[("Deployment", "vmselect")])
    if factor > 1:
        assert "dedup.minScrapeInterval" in selecting
    for (kind, name), d in objects.items():
        assert d["metadata"]["namespace"] == "monitoring", name
        if kind not in ("Deployment", "StatefulSet"):
            continue
        pod = d["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert c["image"].endswith("-cluster"), name
    policy = objects[("NetworkPolicy", "vmstorage")]
    admitted = {
        rule["ports"][0]["port"]: rule["from"][0]["podSelector"].get("matchLabels", {})
        for rule in policy["spec"]["ingress"]
    }
    assert admitted["vminsert"] == {"app.kubernetes.io/name": "vminsert"}
    assert admitted["vmselect"] == {"app.kubernetes.io/name": "vmselect"}


def test_the_cluster_variant_renders_with_vmagent_writing_into_vminsert() -> None:
    """``kubectl kustomize --load-restrictor=LoadRestrictionsNone`` of the variant (the
    command its kustomization names): the single-node store is not in it, vmagent is, with
    the scrape config one level up, writing into vminsert's tenant 0."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: its kustomize renders the variant")
    rendered = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(CLUSTER_DEPLOY)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rendered.returncode == 0, rendered.stderr
    objects = {
        (d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered.stdout) if d
    }
    assert ("StatefulSet", "victoria-metrics") not in objects
    assert ("Service", "victoria-metrics") not in objects
    port = objects[("Service", "vminsert")]["spec"]["ports"][0]["port"]
    args = objects[("Deployment", "vmagent")]["spec"]["template"]["spec"]["containers"][0]["args"]
    write = (
        f"-remoteWrite.url=http://vminsert.monitoring.svc:{port}/insert/0/prometheus/api/v1/write"
    )
    assert write in args
    assert not [a for a in args if "victoria-metrics.monitoring" in a]
    (scrape,) = [d for (kind, _), d in objects.items() if kind == "ConfigMap"]
    one_up = (CLUSTER_DEPLOY.parent / "scrape.yaml").read_text()
    assert scrape["data"]["scrape.yaml"] == one_up
