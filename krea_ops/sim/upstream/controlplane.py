"""Run the upstream control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, the Kueue manager and the JobSet controller, as
processes of their own with their data, certificates, kubeconfigs and logs under
``<state>/upstream``.

What runs, and how (each as envtest or kubeadm would, on 127.0.0.1 and free ports):

- etcd 3.6, one member, ``--unsafe-no-fsync`` (a test's data is disposable);
- kube-apiserver with RBAC, static bearer tokens for the admin and the control-plane
  components (``--token-auth-file``), service account tokens signed by a key pair of
  ours, the default admission plugins (ServiceAccount included: a controller-manager
  runs), and kubelets reached at their InternalIP and ``daemonEndpoints`` port;
- kube-controller-manager with every default controller (node lifecycle, Job,
  disruption, garbage collector, DaemonSet, ReplicaSet, Deployment, taint eviction,
  service accounts and their tokens) and ``--use-service-account-credentials``, node CIDRs
  not allocated (the simulated nodes bring theirs);
- kube-scheduler with its default profile;
- the Kueue manager and the JobSet controller, with their CRDs applied from the same
  module versions, their webhook servers on loopback with a certificate our CA signs, and
  their webhook configurations registered with ``clientConfig.url`` instead of a Service
  (the rewrite envtest does), names prefixed as their kustomizations would.

Stopping stops every process in reverse order (SIGTERM, then SIGKILL), and every child
also gets SIGKILL if this process dies (``PR_SET_PDEATHSIG``), so nothing is left
listening.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from krea_ops.errors import Unavailable
from krea_ops.sim.upstream import build
from krea_ops.sim.upstream.pki import Pki

ADMIN_USER = "krea-sim-admin"
SERVICE_CIDR = "10.0.0.0/24"
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue's main.go
# Resources a pod requests that Kueue's ClusterQueues do not cover (only nvidia.com/gpu
# counts against quota here): without this Kueue calls a pod requesting cpu inadmissible.
KUEUE_EXCLUDED = ["cpu", "memory", "ephemeral-storage", "pods", "hugepages-"]
Progress = Callable[[str], None]


class PortTaken(Unavailable):
    """A component exited because a port picked for it was taken between the pick and its
    bind (another process on the machine got it first): started again on other ports."""


PORT_TRIES = 3
PROBE = "krea-sim-webhook-probe"  # the dry-run object that finds a controller's webhooks


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Process:
    """One component: its command, its log file, and a way to stop it."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(x.strip() for x in text[-lines:])

    def terminate(self) -> None:
        """SIGTERM, not waited for (``stop`` waits)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, grace_s: float = 10.0) -> None:
        if self.alive():
            self.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


class UpstreamControlPlane:
    """``with UpstreamControlPlane(state_dir) as cp: cp.api_client()`` — the same
    surface as ``LocalApiServer`` (``url``, ``kubeconfig``, ``ca_cert``, ``token``,
    ``state_dir``, ``api_client()``, ``close()``) for the simulated world to run on.

    ``node_grace_s`` is the node lifecycle controller's ``--node-monitor-grace-period``:
    at least the simulated kubelets' Lease duration, which grows with the node count.
    ``kueue_feature_gates``: Kueue's feature gates to set besides the defaults.
    """

    def __init__(
        self,
        state_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_out: Path | str | None = None,
        node_grace_s: float = 50.0,
        progress: Progress | None = None,
        root: Path | None = None,
        kueue_setup: bool = True,
        kueue_feature_gates: dict[str, bool] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / "upstream"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._say = progress or (lambda _line: None)
        self._t0 = time.monotonic()
        self.host = host
        self.processes: list[Process] = []
        self.root = root or build.ensure_built(self._say)
        self.bin = self.root / "bin"
        self.pki = Pki(self.dir / "pki")
        self.tokens = self._tokens()
        self.token = self.tokens[ADMIN_USER]
        self.ca_cert = self.pki.ca.cert
        self._port_given = port is not None
        self.port = port or free_port(host)
        self.url = f"https://{host}:{self.port}"
        from krea_ops.sim.common.kubeconfig import write_kubeconfig

        try:
            preinstalled = self._from_template()
            self._again_on_other_ports(self._start_etcd)
            self._again_on_other_ports(self._start_apiserver, fixed=self._port_given)
            self.kubeconfig = write_kubeconfig(
                kubeconfig_out or self.state_dir / "kubeconfig",
                self.url,
                self.token,
                self.ca_cert.read_bytes(),
            )
            self._node_grace_s = node_grace_s
            # the components after the API server start side by side, each spawned from
            # this thread (a child dies with the thread that spawned it: PR_SET_PDEATHSIG)
            # and then waited for: the controller-manager and the scheduler while the
            # CRDs are applied, JobSet and Kueue once they are established
            gates = kueue_feature_gates or {}
            both = self._launch_all(
                [lambda: self._launch_kcm(node_grace_s), self._launch_scheduler]
            )
            self._apply_crds(apply=not preinstalled)
            both()
            self._launch_all([self._launch_jobset, lambda: self._launch_kueue(gates)])()
            if kueue_setup:
                self.apply_files(kueue_setup_files())
        except BaseException:
            self.close()
            raise

    # -- plumbing -------------------------------------------------------------------------

    def _again_on_other_ports(self, start: Callable[[], None], *, fixed: bool = False) -> None:
        """``start`` a component; when a port picked for it was taken before it bound
        (``PortTaken``), start it again on new ones, up to ``PORT_TRIES`` times. ``fixed``:
        its port was given by the caller, so a taken one is the caller's error."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                start()
                return
            except PortTaken:
                if fixed or attempt == PORT_TRIES:
                    raise
                self._progress("a port picked for it was taken meanwhile: again on new ones")
                if start == self._start_apiserver:
                    self.port = free_port(self.host)
                    self.url = f"https://{self.host}:{self.port}"

    def _launch_all(self, launches: list[Callable[[], Callable[[], None]]]) -> Callable[[], None]:
        """Spawn each component now; the callable returned waits for each to be up, one
        spawned again on new ports where a port picked for it was taken meanwhile."""
        waits = [(launch, launch()) for launch in launches]

        def again(launch: Callable[[], Callable[[], None]]) -> None:
            self._progress("a port picked for it was taken meanwhile: again on new ones")
            self._again_on_other_ports(lambda: launch()())

        def wait() -> None:
            for launch, waited in waits:
                try:
                    waited()
                except PortTaken:
                    again(launch)

        return wait

    def _progress(self, line: str) -> None:
        self._say(f"{line} ({time.monotonic() - self._t0:.1f} s)")

    def _tokens(self) -> dict[str, str]:
        """Static bearer tokens (``--token-auth-file``), one per identity, kept 0600."""
        path = self.dir / "pki" / "tokens.csv"
        users = {
            ADMIN_USER: "system:masters",
            "system:kube-controller-manager": "",
            "system:kube-scheduler": "",
        }
        tokens: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split(",")
                if len(parts) >= 2:
                    tokens[parts[1]] = parts[0]
        if set(tokens) != set(users):
            tokens = {user: secrets.token_urlsafe(32) for user in users}
            rows = [
                f'{tokens[u]},{u},{u},"{g}"' if g else f"{tokens[u]},{u},{u}"
                for u, g in users.items()
            ]
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(rows) + "\n")
        return tokens

    def _kubeconfig_for(self, user: str) -> Path:
        from krea_ops.sim.common.kubeconfig import write_kubeconfig

        return write_kubeconfig(
            self.dir / "kubeconfigs" / f"{user.replace(':', '-')}.kubeconfig",
            self.url,
            self.tokens[user],
            self.ca_cert.read_bytes(),
        )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        proc = Process(name, argv, self.dir / "logs" / f"{name}.log", env)
        self.processes.append(proc)
        return proc

    def _wait(
        self, proc: Process, what: str, ok: Callable[[], bool], timeout_s: float = 180.0
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                tail = proc.tail()
                error = PortTaken if "address already in use" in tail else Unavailable
                raise error(
                    f"{proc.name} exited with {proc.proc.returncode} before {what}: "
                    f"{tail} (log: {proc.log})"
                )
            if ok():
                self._progress(f"{proc.name}: {what}")
                return
            time.sleep(0.1)
        raise Unavailable(f"{proc.name} not {what} within {timeout_s:.0f} s (log: {proc.log})")

    def _get(self, url: str, token: str | None = None, ca: Path | None = None) -> int:
        ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ValueError):
            return 0

    # -- components -----------------------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name=krea-sim",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=krea-sim=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(proc, "serving", lambda: self._get(f"{self.etcd_url}/health") == 200, 60)

    def _start_apiserver(self) -> None:
        serving = self.pki.serving("kube-apiserver", (self.host, "127.0.0.1", "localhost"))
        sa = self.pki.service_account_keys()
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={self.host}",
                f"--advertise-address={self.host}",
                f"--secure-port={self.port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.pki.ca.cert}",
                f"--token-auth-file={self.dir / 'pki' / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(
            proc,
            f"ready on {self.url}",
            lambda: self._get(f"{self.url}/readyz", self.token, self.pki.ca.cert) == 200,
        )

    def _launch_kcm(self, node_grace_s: float) -> Callable[[], None]:
        sa = self.pki.service_account_keys()
        return self._launch_component(
            "kube-controller-manager",
            [
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={self.pki.ca.cert}",
                f"--cluster-signing-cert-file={self.pki.ca.cert}",
                f"--cluster-signing-key-file={self.pki.ca.key}",
                "--allocate-node-cidrs=false",
                f"--node-monitor-grace-period={int(max(node_grace_s, 40))}s",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )

    def _launch_scheduler(self) -> Callable[[], None]:
        return self._launch_component("kube-scheduler", [])

    def _launch_component(self, name: str, flags: list[str]) -> Callable[[], None]:
        """kube-controller-manager or kube-scheduler: as ``system:NAME`` (its bootstrap
        RBAC), delegated authentication and authorisation through the same kubeconfig,
        its secure port on loopback (waited for by its /healthz), no leader election."""
        kubeconfig = self._kubeconfig_for(f"system:{name}")
        port = free_port()
        proc = self._spawn(
            name,
            [
                str(self.bin / name),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                "--profiling=false",
                *flags,
            ],
        )
        return lambda: self._wait(
            proc, "healthy", lambda: self._get(f"https://127.0.0.1:{port}/healthz") == 200
        )

    def _crd_files(self) -> list[Path]:
        manifests = self.root / "manifests"
        return sorted((manifests / "kueue" / "crd").glob("*.yaml")) + sorted(
            (manifests / "jobset" / "crd").glob("*.yaml")
        )

    def _from_template(self) -> bool:
        """Start from a copy of the etcd data of a control plane of the same binaries that
        had the CRDs applied and nothing else: ``<binaries' dir>/etcd-template``, made the
        first time it is needed (``KREA_OPS_UPSTREAM_TEMPLATE=0`` turns this off). True when
        this state directory got that copy: the API server then serves the CRDs as it
        starts, and their 4-5 s of applying and establishing go (the tests start many
        control planes). What the API server wrote of its own there (the ``kubernetes``
        Service's endpoints, its identity Lease) it rewrites as a restarted one does."""
        target = self.dir / "etcd"
        if os.environ.get("KREA_OPS_UPSTREAM_TEMPLATE") == "0" or target.exists():
            return False
        template = self.root / "etcd-template"
        if not template.is_dir():
            try:
                made = Path(tempfile.mkdtemp(prefix="etcd-template.", dir=self.root))
            except OSError:
                return False  # a read-only binaries' directory: no template
            try:
                seed = UpstreamControlPlane.__new__(UpstreamControlPlane)
                seed._seed(made, self.root)
                with contextlib.suppress(OSError):  # another process made it first
                    os.rename(made / "upstream" / "etcd", template)
            finally:
                shutil.rmtree(made, ignore_errors=True)
            self._progress("etcd template with the CRDs made")
        shutil.copytree(template, target)
        return True

    def _seed(self, state: Path, root: Path) -> None:
        """etcd and the API server only, the CRDs applied and established, both stopped."""
        self.state_dir = state
        self.dir = state / "upstream"
        self.dir.mkdir(parents=True)
        self._say = lambda _line: None
        self._t0 = time.monotonic()
        self.host = "127.0.0.1"
        self.processes = []
        self.root, self.bin = root, root / "bin"
        self.pki = Pki(self.dir / "pki")
        self.tokens = self._tokens()
        self.token = self.tokens[ADMIN_USER]
        self.ca_cert = self.pki.ca.cert
        self._port_given = False
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        try:
            self._again_on_other_ports(self._start_etcd)
            self._again_on_other_ports(self._start_apiserver)
            self._apply_crds()
        finally:
            self.close()

    def _apply_crds(self, apply: bool = True) -> None:
        files = self._crd_files()
        if apply:
            self.apply_files(files)
        names = [doc["metadata"]["name"] for p in files for doc in load_yaml(p)]
        from kubernetes import client as k8s

        api = k8s.ApiextensionsV1Api(self.api_client())
        deadline = time.monotonic() + 60
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                crd: Any = api.read_custom_resource_definition(name, _preload_content=False)
                conds = (json.loads(crd.data).get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                    pending.discard(name)
            if pending:
                time.sleep(0.2)
        if pending:
            raise Unavailable(f"CRDs not established within 60 s: {', '.join(sorted(pending))}")
        self._progress(f"CRDs: {len(names)} established (Kueue, JobSet)")

    def _webhooks(self, component: str, port: int, prefix: str) -> list[dict[str, Any]]:
        """The component's webhook configurations from its module, with each service
        reference rewritten to ``https://127.0.0.1:PORT/path`` and our CA as caBundle."""
        path = self.root / "manifests" / component / "webhooks.yaml"
        ca = base64.b64encode(self.pki.ca.cert.read_bytes()).decode()
        out = []
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
            for hook in doc.get("webhooks") or []:
                svc = hook["clientConfig"].pop("service")
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{svc.get('path', '/')}",
                    "caBundle": ca,
                }
            out.append(doc)
        return out

    def _controller_config(
        self, component: str, config: dict[str, Any], webhook_port: int
    ) -> tuple[Path, Path]:
        serving = self.pki.serving(f"{component}-webhook")
        certs = self.dir / component / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        for src, dst in ((serving.cert, "tls.crt"), (serving.key, "tls.key")):
            target = certs / dst
            if not target.exists():
                target.write_bytes(src.read_bytes())
                os.chmod(target, 0o600)
        config["webhook"] = {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)}
        path = self.dir / component / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path, certs

    def _launch_jobset(self) -> Callable[[], None]:
        webhook, health = free_port(), free_port()
        config, _ = self._controller_config(
            "jobset",
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                "metrics": {"bindAddress": "0"},
                "clientConnection": {"qps": 200, "burst": 400},
            },
            webhook,
        )
        proc = self._spawn(
            "jobset-controller",
            [str(self.bin / "jobset-controller"), f"--config={config}", "--zap-log-level=info"],
            env={"KUBECONFIG": str(self.kubeconfig)},
        )
        probe = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": PROBE, "namespace": "default"}, "spec": {}}  # fmt: skip
        return self._controller_up(proc, "jobset", health, webhook, probe)

    def _launch_kueue(self, feature_gates: dict[str, bool]) -> Callable[[], None]:
        webhook, health = free_port(), free_port()
        config, certs = self._controller_config(
            "kueue",
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "namespace": "kueue-system",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                "metrics": {"bindAddress": "0"},
                "clientConnection": {"qps": 200, "burst": 400},
                "integrations": {
                    "frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "pod"],
                },
                "resources": {"excludeResourcePrefixes": KUEUE_EXCLUDED},
                # The on-demand visibility API server would listen on every interface (port
                # 8082) with a certificate from a fixed /visibility: krea-ops reads Workloads.
                "featureGates": {"VisibilityOnDemand": False, **feature_gates},
            },
            webhook,
        )
        self._kueue_metrics_certs(certs)
        self.apply_objects(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}]
        )
        proc = self._spawn(
            "kueue",
            [str(self.bin / "kueue"), f"--config={config}", "--zap-log-level=info"],
            env={"KUBECONFIG": str(self.kubeconfig)},
        )
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": PROBE}, "spec": {}}  # fmt: skip
        return self._controller_up(proc, "kueue", health, webhook, probe)

    def _controller_up(
        self, proc: Process, component: str, health: int, webhook: int, probe: dict[str, Any]
    ) -> Callable[[], None]:
        """What waits for JobSet's or Kueue's controller: ready, its webhook configurations
        applied, and the API server reaching its webhooks (``_wait_webhooks``)."""

        def up() -> None:
            self._wait(proc, "ready", lambda: self._get(f"http://127.0.0.1:{health}/readyz") == 200)
            self.apply_objects(self._webhooks(component, webhook, f"{component}-"))
            self._wait_webhooks(proc, probe)

        return up

    def _wait_webhooks(self, proc: Process, probe: dict[str, Any]) -> None:
        """Until the API server reaches the component's webhooks: a dry-run create of the
        ``probe`` object (invalid, so that nothing would be made) is answered by them,
        accepted or refused, rather than failing to call them. A controller reports ready
        before its webhook server serves every path (JobSet's answered 404 for a while:
        "failed to call webhook: the server could not find the requested resource")."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        api = k8s.CustomObjectsApi(self.api_client())
        group, version = probe["apiVersion"].split("/")
        plural = probe["kind"].lower() + "s"
        namespace = probe["metadata"].get("namespace")

        def answered() -> bool:
            try:
                if namespace:
                    api.create_namespaced_custom_object(
                        group, version, namespace, plural, probe, dry_run="All",
                        _preload_content=False,
                    )  # fmt: skip
                else:
                    api.create_cluster_custom_object(
                        group, version, plural, probe, dry_run="All", _preload_content=False
                    )
                return True
            except ApiException as exc:
                return "failed calling webhook" not in str(exc.body)

        self._wait(proc, "webhooks answering", answered, 60)

    def _kueue_metrics_certs(self, certs: Path) -> None:
        """Kueue v0.19 with its internal certificates off reads its metrics certificate
        from a fixed path (cmd/kueue/main.go) and exits without one: write ours there when
        none is, which needs root (CI's and the dev machines' user)."""
        want = KUEUE_METRICS_CERTS
        if (want / "tls.crt").exists() and (want / "tls.key").exists():
            return
        try:
            want.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                tmp = want / f".{name}.{os.getpid()}"
                tmp.write_bytes((certs / name).read_bytes())
                os.chmod(tmp, 0o600)
                os.replace(tmp, want / name)
        except OSError as exc:
            raise Unavailable(
                f"Kueue reads its metrics certificate from {want} and it cannot be written "
                f"({exc.strerror}): run once as root, or create tls.crt and tls.key there"
            ) from exc

    # -- applying -------------------------------------------------------------------------

    def apply_files(self, files: list[Path]) -> None:
        objects: list[dict[str, Any]] = []
        for path in files:
            objects.extend(load_yaml(path))
        self.apply_objects(objects)

    def apply_objects(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply each object (field manager ``krea-sim``), retrying a refusal
        while a webhook it needs is still starting."""
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import DynamicApiError

        dyn = DynamicClient(self.api_client())
        for obj in objects:
            resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            deadline = time.monotonic() + 60
            while True:
                try:
                    resource.server_side_apply(
                        body=obj,
                        namespace=(obj.get("metadata") or {}).get("namespace"),
                        field_manager="krea-sim",
                        force_conflicts=True,
                    )
                    break
                except DynamicApiError as exc:
                    if exc.status >= 500 and time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                    raise

    def restart_controller_manager(self) -> None:
        """Stop kube-controller-manager and start a new one, as after a restart of the
        real one: every controller's memory is gone (the node lifecycle controller's health
        record of each node name, which it keeps even after the node is deleted, among
        them) and each builds its state again from lists."""
        for proc in [p for p in self.processes if p.name == "kube-controller-manager"]:
            proc.stop()
            self.processes.remove(proc)
        self._again_on_other_ports(lambda: self._launch_kcm(self._node_grace_s)())

    def api_client(self) -> Any:
        from krea_ops.sim.common.kubeconfig import bearer_client

        return bearer_client(self.url, self.token, self.ca_cert)

    def close(self) -> None:
        """Every component told to stop at once (kube-apiserver and Kueue each take about
        a second to shut down), etcd last, once the others are gone."""
        last = [p for p in self.processes if p.name == "etcd"]
        first = [p for p in self.processes if p.name != "etcd"]
        for proc in first:
            proc.terminate()
        for proc in (*reversed(first), *last):
            proc.stop()
        self.processes.clear()

    def __enter__(self) -> UpstreamControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the workloads CRD
    with open(path) as f:  # is 1.4 MB, 3.7 s in pure Python, 0.2 s with it
        return tuple(d for d in yaml.load_all(f, Loader=loader) if d)


def load_yaml(path: Path) -> list[dict[str, Any]]:
    """The documents of a YAML file, parsed once per process (a copy each call)."""
    return copy.deepcopy(list(_parsed(path, path.stat().st_mtime_ns)))


def kueue_setup_files() -> list[Path]:
    """``deploy/kueue``'s resources in its kustomization's order."""
    root = Path(__file__).resolve().parents[3] / "deploy" / "kueue"
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    return [root / name for name in kustomization["resources"]]
