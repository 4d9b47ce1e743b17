"""Who may do what, as a real cluster decides it: ServiceAccounts and their bound tokens
(``kubectl create token``), RBAC Roles and bindings enforced for those tokens and for
static-token users, the review APIs behind ``kubectl auth can-i`` and ``kubectl auth
whoami``, and Secrets. Driven by real kubectl and the official client.

The Forbidden wording is staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go ``forbiddenMessage`` inside apimachinery's ``NewForbidden``."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.kubeconfig import write_kubeconfig
from tests.conftest import KUBECTL, ROOT, Kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

SA_GROUPS = "[system:serviceaccounts system:serviceaccounts:default system:authenticated]"


class ShiftedClock:
    """The server's clock, movable forward so a test can outlive a token."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
def server(tmp_path: Path, clock: ShiftedClock) -> Iterator[LocalApiServer]:
    s = LocalApiServer(
        tmp_path / "state",
        crds=False,
        users={"carol-token": ("carol", ["devs"])},
        clock=clock,
    )
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def kubectl(server: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(server.kubeconfig, tmp_path)


@pytest.fixture
def core(server: LocalApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client())


def as_token(s: LocalApiServer, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = s.url
    cfg.api_key = {"authorization": f"Bearer {token}"}
    cfg.ssl_ca_cert = str(s.ca_cert)
    return client.ApiClient(cfg)


def _pod(core: client.CoreV1Api, name: str, ns: str = "default") -> None:
    core.create_namespaced_pod(
        ns, {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )


def _status(exc: pytest.ExceptionInfo[ApiException]) -> dict:  # type: ignore[type-arg]
    return json.loads(exc.value.body)


def _get_raw(s: LocalApiServer, path: str, token: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    ctx = ssl.create_default_context(cafile=str(s.ca_cert))
    req = urllib.request.Request(s.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_role_that_only_reads_pods_through_kubectl(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer
) -> None:
    assert kubectl("create", "serviceaccount", "reader").stdout == "serviceaccount/reader created\n"
    sa_table = kubectl("get", "sa").stdout.splitlines()
    assert sa_table[0].split() == ["NAME", "SECRETS", "AGE"]
    assert sa_table[1].split()[:2] == ["reader", "0"]
    kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
    kubectl(
        "create", "rolebinding", "reader", "--role=pod-reader", "--serviceaccount=default:reader"
    )
    wide = kubectl("get", "rolebinding", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert wide[1].split()[:2] == ["reader", "Role/pod-reader"]
    assert wide[1].split()[-1] == "default/reader"
    _pod(core, "x")

    token = kubectl("create", "token", "reader").stdout.strip()
    assert token.count(".") == 2  # a JWT
    as_reader = ["--token", token]
    pods = kubectl(*as_reader, "get", "pods").stdout.splitlines()
    assert pods[0].split()[:2] == ["NAME", "READY"] and pods[1].split()[0] == "x"

    denied = kubectl(*as_reader, "delete", "pod", "x", check=False)
    assert denied.returncode == 1
    assert denied.stderr == (
        'Error from server (Forbidden): pods "x" is forbidden: User '
        '"system:serviceaccount:default:reader" cannot delete resource "pods" in API group "" '
        'in the namespace "default"\n'
    )
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["x"]
    nodes = kubectl(*as_reader, "get", "nodes", check=False)
    assert nodes.returncode == 1 and nodes.stderr == (
        "Error from server (Forbidden): nodes is forbidden: User "
        '"system:serviceaccount:default:reader" cannot list resource "nodes" in API group "" '
        "at the cluster scope\n"
    )

    no = kubectl(*as_reader, "auth", "can-i", "delete", "pods", check=False)
    assert (no.returncode, no.stdout) == (1, "no\n")
    yes = kubectl(*as_reader, "auth", "can-i", "get", "pods")
    assert yes.stdout == "yes\n"
    elsewhere = kubectl(
        *as_reader, "auth", "can-i", "list", "pods", "-n", "kube-system", check=False
    )
    assert (elsewhere.returncode, elsewhere.stdout) == (1, "no\n")  # a RoleBinding's reach
    assert kubectl("auth", "can-i", "delete", "pods").stdout == "yes\n"  # the admin

    whoami = kubectl(*as_reader, "auth", "whoami").stdout.splitlines()
    assert whoami[0].split() == ["ATTRIBUTE", "VALUE"]
    assert whoami[1].split() == ["Username", "system:serviceaccount:default:reader"]
    uid = core.read_namespaced_service_account("reader", "default").metadata.uid
    assert whoami[2].split() == ["UID", uid]
    assert whoami[3] == "Groups" + " " * (len(whoami[3]) - 6 - len(SA_GROUPS)) + SA_GROUPS

    rules = kubectl(*as_reader, "auth", "can-i", "--list").stdout.splitlines()
    assert rules[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["pods", "[]", "[]", "[get", "list]"] in [r.split() for r in rules]
    assert not any(r.split()[0] == "*.*" for r in rules[1:] if r.strip())

    # The official client sees the same 403 Status.
    reader = client.CoreV1Api(as_token(server, token))
    assert [p.metadata.name for p in reader.list_namespaced_pod("default").items] == ["x"]
    with pytest.raises(ApiException) as exc:
        reader.delete_namespaced_pod("x", "default")
    status = _status(exc)
    assert exc.value.status == 403 and status["reason"] == "Forbidden"
    assert status["details"] == {"name": "x", "kind": "pods"}
    # The reason an access review gives is the RBAC authorizer's (rbac.go describers).
    review = client.AuthorizationV1Api(as_token(server, token)).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"}
            },
        }
    )
    assert review.status.allowed is True
    assert review.status.reason == (
        'RBAC: allowed by RoleBinding "reader/default" of Role "pod-reader" to ServiceAccount '
        '"reader/default"'
    )


def test_cluster_role_bindings_reach_the_cluster_scope_role_bindings_one_namespace(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer
) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    _pod(core, "t", "team")
    kubectl("create", "serviceaccount", "ops", "-n", "team")
    token = kubectl("create", "token", "ops", "-n", "team").stdout.strip()
    ops = ["--token", token]
    refused = kubectl(*ops, "get", "nodes", check=False)
    assert 'User "system:serviceaccount:team:ops" cannot list resource "nodes"' in refused.stderr

    kubectl("create", "clusterrole", "node-reader", "--verb=get,list,watch", "--resource=nodes")
    kubectl(
        "create",
        "clusterrolebinding",
        "ops-nodes",
        "--clusterrole=node-reader",
        "--serviceaccount=team:ops",
    )
    crbs = kubectl("get", "clusterrolebinding", "ops-nodes", "-o", "wide").stdout.splitlines()
    assert crbs[1].split()[:2] == ["ops-nodes", "ClusterRole/node-reader"]
    assert crbs[1].split()[-1] == "team/ops"
    assert kubectl(*ops, "get", "nodes").stderr.strip() == "No resources found"

    # A RoleBinding to a ClusterRole grants its rules in the binding's namespace only.
    kubectl(
        "create",
        "rolebinding",
        "ops-view",
        "-n",
        "team",
        "--clusterrole=view",
        "--serviceaccount=team:ops",
    )
    assert kubectl(*ops, "get", "pods", "-n", "team", "-o", "name").stdout == "pod/t\n"
    elsewhere = kubectl(*ops, "get", "pods", "-n", "default", check=False)
    assert elsewhere.stderr.endswith(
        'cannot list resource "pods" in API group "" in the namespace "default"\n'
    )
    everywhere = kubectl(*ops, "get", "pods", "-A", check=False)
    assert everywhere.stderr.endswith(
        'cannot list resource "pods" in API group "" at the cluster scope\n'
    )
    # view reads, never writes, and never reads secrets.
    assert kubectl(*ops, "auth", "can-i", "get", "pods", "-n", "team").stdout == "yes\n"
    assert kubectl(*ops, "auth", "can-i", "create", "pods", "-n", "team", check=False).stdout == (
        "no\n"
    )
    assert kubectl(*ops, "auth", "can-i", "get", "secrets", "-n", "team", check=False).stdout == (
        "no\n"
    )


def test_a_deleted_service_accounts_tokens_stop_working(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer
) -> None:
    kubectl("create", "serviceaccount", "temp")
    token = kubectl("create", "token", "temp").stdout.strip()
    whoami = ["--token", token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]
    assert kubectl(*whoami).stdout == "system:serviceaccount:default:temp"
    assert (
        client.AuthenticationV1Api(as_token(server, token))
        .create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        .status.user_info.username
        == "system:serviceaccount:default:temp"
    )

    kubectl("delete", "serviceaccount", "temp")
    gone = kubectl("--token", token, "auth", "whoami", check=False)
    assert gone.returncode == 1
    assert gone.stderr == "error: You must be logged in to the server (Unauthorized)\n"
    # A new ServiceAccount of the same name is another account: the old token stays dead.
    kubectl("create", "serviceaccount", "temp")
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(as_token(server, token)).list_namespaced_pod("default")
    assert exc.value.status == 401 and _status(exc)["reason"] == "Unauthorized"


def test_tokens_expire_and_must_be_signed_by_the_server(
    kubectl: Kubectl, server: LocalApiServer, clock: ShiftedClock, tmp_path: Path
) -> None:
    kubectl("create", "serviceaccount", "brief")
    short = kubectl("create", "token", "brief", "--duration=5m", check=False)
    assert short.returncode == 1
    assert short.stderr == (
        'error: failed to create token: TokenRequest.authentication.k8s.io "" is invalid: '
        "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 "
        "minutes\n"
    )
    token = kubectl("create", "token", "brief", "--duration=10m").stdout.strip()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["exp"] - claims["iat"] == 600
    assert claims["sub"] == "system:serviceaccount:default:brief"
    whoami = ["--token", token, "auth", "whoami"]
    assert "system:serviceaccount:default:brief" in kubectl(*whoami).stdout

    # Altering the claims breaks the signature.
    forged_claims = dict(claims, sub="system:serviceaccount:kube-system:admin")
    forged_part = base64.urlsafe_b64encode(json.dumps(forged_claims).encode()).rstrip(b"=")
    head, _, sig = token.split(".")
    forged = f"{head}.{forged_part.decode()}.{sig}"
    forged_whoami = kubectl("--token", forged, "auth", "whoami", check=False)
    assert forged_whoami.stderr == "error: You must be logged in to the server (Unauthorized)\n"

    clock.offset = dt.timedelta(minutes=11)
    expired = kubectl(*whoami, check=False)
    assert expired.returncode == 1
    assert expired.stderr == "error: You must be logged in to the server (Unauthorized)\n"


def test_tokens_outlive_a_restart_of_the_server(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with LocalApiServer(state, crds=False) as first:
        core = client.CoreV1Api(first.api_client())
        core.create_namespaced_service_account("default", {"metadata": {"name": "keeper"}})
        token = core.create_namespaced_service_account_token(
            "keeper", "default", {"spec": {"expirationSeconds": 3600}}
        ).status.token
    with LocalApiServer(state, crds=False) as second:
        review = client.AuthenticationV1Api(as_token(second, token)).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        assert review.status.user_info.username == "system:serviceaccount:default:keeper"


def test_a_static_token_user_needs_bindings(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer, tmp_path: Path
) -> None:
    carol_config = write_kubeconfig(
        tmp_path / "carol", server.url, "carol-token", server.ca_cert.read_bytes()
    )
    carol = Kubectl(carol_config, tmp_path / "carol-home")
    refused = carol("get", "pods", check=False)
    assert refused.returncode == 1 and refused.stderr == (
        'Error from server (Forbidden): pods is forbidden: User "carol" cannot list resource '
        '"pods" in API group "" in the namespace "default"\n'
    )
    who = carol("auth", "whoami").stdout.splitlines()
    assert who[1].split() == ["Username", "carol"]
    assert who[2].split() == ["Groups", "[devs", "system:authenticated]"]
    _pod(core, "p")

    # resourceNames, subresources and wildcards, bound to the user's group.
    core.create_namespaced_config_map("default", {"metadata": {"name": "allowed"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "other"}})
    rbac = client.RbacAuthorizationV1Api(server.api_client())
    rbac.create_namespaced_role(
        "default",
        {
            "metadata": {"name": "narrow"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["allowed"],
                    "verbs": ["get"],
                },
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]},
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        "default",
        {
            "metadata": {"name": "devs-narrow"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "narrow"},
            "subjects": [{"kind": "Group", "name": "devs"}],
        },
    )
    assert carol("get", "configmap", "allowed", "-o", "name").stdout == "configmap/allowed\n"
    other = carol("get", "configmap", "other", check=False)
    assert other.stderr == (
        'Error from server (Forbidden): configmaps "other" is forbidden: User "carol" cannot get '
        'resource "configmaps" in API group "" in the namespace "default"\n'
    )
    assert carol("get", "deployments").stderr.strip() == "No resources found in default namespace."
    as_carol = client.CoreV1Api(as_token(server, "carol-token"))
    with pytest.raises(ApiException) as exc:
        as_carol.delete_namespaced_pod("p", "default")
    assert exc.value.status == 403
    as_carol.create_namespaced_pod_eviction(
        "p", "default", {"metadata": {"name": "p", "namespace": "default"}}
    )
    with pytest.raises(ApiException) as exc:
        as_carol.create_namespaced_pod_binding(
            "p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}}
        )
    assert _status(exc)["message"] == (
        'pods "p" is forbidden: User "carol" cannot create resource "pods/binding" in API group '
        '"" in the namespace "default"'
    )

    # Non-resource URLs: denied before routing, allowed by a ClusterRole naming the path.
    code, status = _get_raw(server, "/metrics", "carol-token")
    assert (code, status["reason"], status["message"]) == (
        403,
        "Forbidden",
        'forbidden: User "carol" cannot get path "/metrics"',
    )
    kubectl("create", "clusterrole", "metrics", "--verb=get", "--non-resource-url=/metrics")
    kubectl(
        "create", "clusterrolebinding", "carol-metrics", "--clusterrole=metrics", "--user=carol"
    )
    assert _get_raw(server, "/metrics", "carol-token")[0] == 404


def test_system_masters_and_bootstrap_roles(kubectl: Kubectl, server: LocalApiServer) -> None:
    who = kubectl("auth", "whoami").stdout.splitlines()
    assert who[1].split() == ["Username", "kubernetes-admin"]
    assert who[2].split() == ["Groups", "[system:masters", "system:authenticated]"]
    roles = {line.split()[0] for line in kubectl("get", "clusterroles").stdout.splitlines()[1:]}
    assert {"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user"} <= (
        roles
    )
    admin_binding = json.loads(
        kubectl("get", "clusterrolebinding", "cluster-admin", "-o", "json").stdout
    )
    assert admin_binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}
    ]
    listed = [r.split() for r in kubectl("auth", "can-i", "--list").stdout.splitlines()]
    assert ["*.*", "[]", "[]", "[*]"] in listed


def test_rbac_objects_are_validated(kubectl: Kubectl) -> None:
    bad_ref = kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "bad"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"},
                "subjects": [{"kind": "User", "name": "u"}],
            }
        ),
        check=False,
    )
    assert bad_ref.returncode == 1
    assert (
        'The ClusterRoleBinding "bad" is invalid: roleRef.kind: '
        'Unsupported value: "Role": supported values: "ClusterRole"' in bad_ref.stderr
    )
    url_in_role = kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "urls", "namespace": "default"},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
            }
        ),
        check=False,
    )
    assert "namespaced rules cannot apply to non-resource URLs" in url_in_role.stderr


def test_discovery_lists_the_token_subresource(server: LocalApiServer) -> None:
    resources = client.CoreV1Api(server.api_client()).get_api_resources().resources
    token = next(r for r in resources if r.name == "serviceaccounts/token")
    assert (token.group, token.version, token.kind, token.verbs, token.namespaced) == (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
        ["create"],
        True,
    )


def test_secrets_store_base64_and_never_leak(
    kubectl: Kubectl, core: client.CoreV1Api, capfd: pytest.CaptureFixture[str]
) -> None:
    kubectl("create", "secret", "generic", "s1", "--from-literal=password=hunter2-secret")
    table = kubectl("get", "secrets").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"]
    assert table[1].split()[:3] == ["s1", "Opaque", "1"]
    core.create_namespaced_secret(
        "default",
        {"metadata": {"name": "s2"}, "stringData": {"token": "plain-words-here"}, "type": "x/y"},
    )
    s2 = core.read_namespaced_secret("s2", "default")
    assert s2.data == {"token": base64.b64encode(b"plain-words-here").decode()}
    assert s2.string_data is None and s2.type == "x/y"
    described = kubectl("describe", "secret", "s1").stdout
    assert "password:  14 bytes" in described and "hunter2" not in described
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret(
            "default", {"metadata": {"name": "s3"}, "data": {"bad key": "aHVudGVyMg=="}}
        )
    assert exc.value.status == 422 and "hunter2" not in exc.value.body
    assert (
        'data[bad key]: Invalid value: "bad key": a valid config key must consist'
        in (_status(exc)["message"])
    )
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret(
            "default", {"metadata": {"name": "s4"}, "data": {"k": "hunter2-not-base64!"}}
        )
    assert exc.value.status == 400 and "hunter2" not in exc.value.body
    out, err = capfd.readouterr()
    assert "hunter2" not in out + err and "plain-words" not in out + err


def test_the_reader_manifests_apply_and_serve_the_read_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/rbac/reader.yaml, applied with kubectl and bound to a ServiceAccount, is enough
    for the product's read commands, and a verb it lacks is refused."""
    from commands.main import invoke

    with LocalApiServer(tmp_path / "state") as s:
        kubectl = Kubectl(s.kubeconfig, tmp_path)
        core = client.CoreV1Api(s.api_client())
        core.create_namespace({"metadata": {"name": "krea-ops"}})
        applied = kubectl("apply", "-f", str(ROOT / "deploy/rbac/reader.yaml")).stdout
        assert applied.splitlines() == [
            "clusterrole.rbac.authorization.k8s.io/krea-ops-reader created",
            "role.rbac.authorization.k8s.io/krea-ops-reader-config created",
            "clusterrolebinding.rbac.authorization.k8s.io/krea-ops-reader created",
            "rolebinding.rbac.authorization.k8s.io/krea-ops-reader-config created",
        ]
        core.create_node({"metadata": {"name": "gpu-node-000"}})
        core.create_namespaced_config_map(
            "krea-ops", {"metadata": {"name": "krea-ops-config"}, "data": {"exporters": "{}"}}
        )
        kubectl("create", "serviceaccount", "console", "-n", "krea-ops")
        kubectl(
            "create",
            "clusterrolebinding",
            "console-reads",
            "--clusterrole=krea-ops-reader",
            "--serviceaccount=krea-ops:console",
        )
        kubectl(
            "create",
            "rolebinding",
            "console-config",
            "-n",
            "krea-ops",
            "--role=krea-ops-reader-config",
            "--serviceaccount=krea-ops:console",
        )
        token = kubectl("create", "token", "console", "-n", "krea-ops").stdout.strip()
        config = write_kubeconfig(tmp_path / "console", s.url, token, s.ca_cert.read_bytes())

        monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
        for args in (
            ["queue", "list", "-o", "json"],
            ["queue", "workloads", "-o", "json"],
            ["burst", "status", "-o", "json"],
        ):
            capsys.readouterr()
            code = invoke(["--kubeconfig", str(config), *args])
            out, err = capsys.readouterr()
            assert code == 0, (args, err)
            assert "forbidden" not in err
            json.loads(out)
        code = invoke(["--kubeconfig", str(config), "nodes", "list", "-o", "json"])
        out, err = capsys.readouterr()
        assert [n["name"] for n in json.loads(out)] == ["gpu-node-000"]
        assert "forbidden" not in err

        console = Kubectl(config, tmp_path / "console-home")
        # kubectl cordon reports the refusal and (as upstream) still exits 0
        cordon = console("cordon", "gpu-node-000", check=False)
        assert cordon.stderr.startswith('error: unable to cordon node "gpu-node-000": ')
        assert not (core.read_node("gpu-node-000").spec or client.V1NodeSpec()).unschedulable
        assert (
            'nodes "gpu-node-000" is forbidden: User "system:serviceaccount:krea-ops:console" '
            'cannot patch resource "nodes" in API group "" at the cluster scope' in cordon.stderr
        )
        with pytest.raises(ApiException) as exc:
            client.CoreV1Api(as_token(s, token)).list_secret_for_all_namespaces()
        assert exc.value.status == 403


def test_nobody_grants_what_they_do_not_hold(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer, tmp_path: Path
) -> None:
    """pkg/registry/rbac/validation/rule.go ``ConfirmNoEscalation``: a namespace admin may
    write Roles and bindings within what it holds, and no further, unless it may
    ``escalate`` or ``bind``."""
    core.create_namespace({"metadata": {"name": "team"}})
    kubectl("create", "serviceaccount", "lead", "-n", "team")
    kubectl(
        "create",
        "rolebinding",
        "lead-admin",
        "-n",
        "team",
        "--clusterrole=admin",
        "--serviceaccount=team:lead",
    )
    lead = [
        "--token",
        kubectl("create", "token", "lead", "-n", "team").stdout.strip(),
        "-n",
        "team",
    ]
    kubectl(*lead, "create", "role", "pods", "--verb=get,list,delete", "--resource=pods")
    kubectl(*lead, "create", "rolebinding", "view-it", "--clusterrole=view", "--user=dan")

    too_much = kubectl(
        *lead, "create", "role", "nodes", "--verb=get,list", "--resource=nodes,pods", check=False
    )
    assert too_much.returncode == 1
    assert too_much.stderr == (
        'Error from server (Forbidden): roles.rbac.authorization.k8s.io "nodes" is forbidden: '
        'user "system:serviceaccount:team:lead" (groups=["system:serviceaccounts" '
        '"system:serviceaccounts:team" "system:authenticated"]) is attempting to grant RBAC '
        'permissions not currently held:\n{APIGroups:[""], Resources:["nodes"], '
        'Verbs:["get" "list"]}\n'
    )
    to_admin = kubectl(
        *lead,
        "create",
        "rolebinding",
        "root",
        "--clusterrole=cluster-admin",
        "--user=dan",
        check=False,
    )
    assert to_admin.returncode == 1
    assert '"root" is forbidden: user "system:serviceaccount:team:lead"' in to_admin.stderr
    assert '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}' in to_admin.stderr

    # Allowed to bind cluster-admin by name (the bind verb), the same binding goes through.
    kubectl(
        "create",
        "role",
        "binder",
        "-n",
        "team",
        "--verb=bind",
        "--resource=clusterroles",
        "--resource-name=cluster-admin",
    )
    kubectl(
        "create",
        "rolebinding",
        "lead-binder",
        "-n",
        "team",
        "--role=binder",
        "--serviceaccount=team:lead",
    )
    kubectl(*lead, "create", "rolebinding", "root", "--clusterrole=cluster-admin", "--user=dan")


def test_a_pod_bound_token_dies_with_its_pod(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer
) -> None:
    kubectl("create", "serviceaccount", "worker")
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "w"},
            "spec": {"serviceAccountName": "worker", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    _pod(core, "other")  # runs as "default"
    wrong = kubectl(
        "create",
        "token",
        "worker",
        "--bound-object-kind=Pod",
        "--bound-object-name=other",
        check=False,
    )
    assert wrong.stderr == (
        'error: failed to create token: cannot bind token for serviceaccount "worker" to pod '
        "running with different serviceaccount name.\n"
    )
    token = kubectl(
        "create", "token", "worker", "--bound-object-kind=Pod", "--bound-object-name=w"
    ).stdout.strip()
    pod_uid = core.read_namespaced_pod("w", "default").metadata.uid
    review = client.AuthenticationV1Api(as_token(server, token)).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    extra = review.status.user_info.extra
    assert extra["authentication.kubernetes.io/pod-name"] == ["w"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod_uid]

    core.delete_namespaced_pod("w", "default", grace_period_seconds=0)
    gone = kubectl("--token", token, "auth", "whoami", check=False)
    assert gone.stderr == "error: You must be logged in to the server (Unauthorized)\n"


def test_impersonation_needs_the_impersonate_verb(
    kubectl: Kubectl, core: client.CoreV1Api, server: LocalApiServer, tmp_path: Path
) -> None:
    kubectl("create", "serviceaccount", "reader")
    kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
    kubectl(
        "create", "rolebinding", "reader", "--role=pod-reader", "--serviceaccount=default:reader"
    )
    as_sa = ["--as=system:serviceaccount:default:reader"]
    # The admin (system:masters) may impersonate anyone, and then has only their rights.
    assert kubectl(*as_sa, "auth", "can-i", "list", "pods").stdout == "yes\n"
    assert kubectl(*as_sa, "auth", "can-i", "delete", "pods", check=False).stdout == "no\n"
    who = kubectl(*as_sa, "auth", "whoami").stdout
    assert SA_GROUPS in who
    assert kubectl("--as=dan", "--as-group=devs", "auth", "whoami").stdout.splitlines()[
        2
    ].split() == [
        "Groups",
        "[devs",
        "system:authenticated]",
    ]
    carol_config = write_kubeconfig(
        tmp_path / "carol", server.url, "carol-token", server.ca_cert.read_bytes()
    )
    carol = Kubectl(carol_config, tmp_path / "carol-home")
    # Impersonation applies to discovery as well (client-go then reports only "unknown"
    # for the 403 on /api): warm carol's discovery cache as herself first.
    carol("api-resources", "-o", "name")
    refused = carol(*as_sa, "get", "pods", check=False)
    assert refused.stderr == (
        'Error from server (Forbidden): serviceaccounts "reader" is forbidden: User "carol" '
        'cannot impersonate resource "serviceaccounts" in API group "" in the namespace '
        '"default"\n'
    )
    kubectl(
        "create",
        "role",
        "impersonate-reader",
        "--verb=impersonate",
        "--resource=serviceaccounts",
        "--resource-name=reader",
    )
    kubectl("create", "rolebinding", "carol-as-reader", "--role=impersonate-reader", "--user=carol")
    _pod(core, "p")
    assert carol(*as_sa, "get", "pods", "-o", "name").stdout == "pod/p\n"
    users = carol("--as=root", "get", "pods", check=False)
    assert users.stderr == (
        'Error from server (Forbidden): users "root" is forbidden: User "carol" cannot '
        'impersonate resource "users" in API group "" at the cluster scope\n'
    )


def test_updates_keep_what_may_not_change(kubectl: Kubectl, core: client.CoreV1Api) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "u"}],
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(binding))
    binding["roleRef"]["name"] = "edit"
    changed = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(binding), check=False)
    assert changed.stderr == (
        'The RoleBinding "b" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:'
        '"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef\n'
    )

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "stringData": {"user": "admin"},
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(secret))
    secret["stringData"] = {"user": "root"}
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(secret))
    stored = core.read_namespaced_secret("creds", "default")
    assert stored.data == {"user": base64.b64encode(b"root").decode()}
    assert stored.string_data is None
    secret["type"] = "kubernetes.io/basic-auth"
    retyped = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(secret), check=False)
    assert 'type: Invalid value: "kubernetes.io/basic-auth": field is immutable' in retyped.stderr


def test_kubectl_create_sends_protobuf_that_reads_as_the_json(kubectl: Kubectl) -> None:
    """kubectl's typed clients send protobuf; what is stored reads as the same object a JSON
    client would have created."""
    kubectl(
        "create",
        "clusterrole",
        "monitoring",
        "--aggregation-rule=rbac.example.com/aggregate-to-monitoring=true",
    )
    kubectl(
        "create",
        "clusterrole",
        "reader",
        "--verb=get,list",
        "--resource=pods,jobs.batch",
        "--resource-name=a",
    )
    kubectl("create", "clusterrolebinding", "r", "--clusterrole=reader", "--group=g", "--user=u")
    kubectl("create", "secret", "generic", "s", "--from-literal=k=v", "--type=x/y")
    got = {
        name: json.loads(kubectl("get", *name.split("/"), "-o", "json").stdout)
        for name in (
            "clusterrole/monitoring",
            "clusterrole/reader",
            "clusterrolebinding/r",
            "secret/s",
        )
    }
    assert got["clusterrole/monitoring"]["aggregationRule"] == {
        "clusterRoleSelectors": [
            {"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}
        ]
    }
    assert got["clusterrole/reader"]["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": ["a"],
            "verbs": ["get", "list"],
        },
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "resourceNames": ["a"],
            "verbs": ["get", "list"],
        },
    ]
    assert got["clusterrolebinding/r"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "u"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"},
    ]
    assert got["clusterrolebinding/r"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "reader",
    }
    secret = got["secret/s"]
    assert (secret["type"], secret["data"]) == ("x/y", {"k": "dg=="})
    # gogo-protobuf writes every string field, empty or not; none of those reads back
    assert not {k for k, v in secret["metadata"].items() if v in ("", None, [], {})}
    assert {"selfLink", "generateName", "finalizers"}.isdisjoint(secret["metadata"])


def test_access_reviews_for_other_subjects_and_their_validation(server: LocalApiServer) -> None:
    authz = client.AuthorizationV1Api(server.api_client())
    rbac = client.RbacAuthorizationV1Api(server.api_client())
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "devs-view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"kind": "Group", "name": "devs"}],
        }
    )

    def review(spec: dict) -> client.V1SubjectAccessReviewStatus:  # type: ignore[type-arg]
        return authz.create_subject_access_review(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        ).status

    list_pods = {"verb": "list", "resource": "pods", "namespace": "default"}
    assert review({"user": "carol", "resourceAttributes": list_pods}).allowed is False
    allowed = review({"user": "carol", "groups": ["devs"], "resourceAttributes": list_pods})
    assert allowed.allowed is True
    assert allowed.reason == (
        'RBAC: allowed by ClusterRoleBinding "devs-view" of ClusterRole "view" to Group "devs"'
    )
    with pytest.raises(ApiException) as exc:
        review({"resourceAttributes": list_pods})
    assert _status(exc)["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": '
        "at least one of user or group must be specified"
    )
    with pytest.raises(ApiException) as exc:
        authz.create_self_subject_access_review(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
        )
    assert _status(exc)["message"] == (
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must '
        "be specified"
    )
