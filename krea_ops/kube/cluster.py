"""Read the cluster as snapshots: nodes, pods, the krea-ops ConfigMap, custom objects.

Every list is scoped (label and field selectors) and paginated (``limit``/``continue``),
and reads raw JSON (``_preload_content=False``) instead of building the client's model
objects, which costs more than the network on a 4,096-node list. Every failure becomes one
``Unavailable`` line that names the part and the fix: an API server that does not answer,
RBAC that forbids the list, a CRD that is not installed.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from krea_ops.errors import BadInput, Unavailable
from krea_ops.kube.quantity import as_int
from krea_ops.kube.rules import condition, controller_text
from krea_ops.kube.times import parse_time
from krea_ops.model import NodeInfo, PodInfo, Taint
from krea_ops.settings import check_url

PAGE_SIZE = 500
CONNECT_TIMEOUT_S = 5.0
# A request the API server turned away before doing anything (429 from max-in-flight or
# priority-and-fairness, with its Retry-After) is sent again after the wait it asks for,
# at most this often and never waiting longer than this per time, nor past the request
# timeout in all; then the 429 is the answer.
THROTTLE_RETRIES = 5
MAX_RETRY_AFTER_S = 10.0
OPS_NAMESPACE = "krea-ops"
OPS_CONFIGMAP = "krea-ops-config"
GPU_RESOURCE = "nvidia.com/gpu"
VIRTUAL_NODE_LABEL = ("type", "virtual-kubelet")
RBAC_HINT = "grant the krea-ops-reader ClusterRole (deploy/rbac/reader.yaml)"
# a refused write: the reader role cannot help, the acting identity's own role must allow it
RBAC_WRITE_HINT = (
    "the identity acting needs this verb: its own role (an operator's, or the "
    "controller's ClusterRole in deploy/controllers/)"
)


def node_info(obj: dict[str, Any]) -> NodeInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = dict(meta.get("labels") or {})
    cond = condition(obj, "Ready") or {}
    ready_status = cond.get("status")
    taints = tuple(
        Taint(t.get("key", ""), t.get("value"), t.get("effect", ""))
        for t in spec.get("taints") or ()
    )
    return NodeInfo(
        name=meta.get("name", ""),
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready={"True": True, "False": False}.get(ready_status or ""),
        ready_reason=cond.get("reason"),
        ready_status=ready_status,
        ready_message=cond.get("message"),
        ready_since=parse_time(cond.get("lastTransitionTime")),
        gpu_capacity=as_int((status.get("capacity") or {}).get(GPU_RESOURCE)),
        gpu_allocatable=as_int((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        virtual=labels.get(VIRTUAL_NODE_LABEL[0]) == VIRTUAL_NODE_LABEL[1],
        created_at=parse_time(meta.get("creationTimestamp")),
    )


def pod_gpus(spec: dict[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or ():
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += as_int(value) or 0
    return total


def pod_info(obj: dict[str, Any]) -> PodInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    owner = controller_text(obj)
    return PodInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node=spec.get("nodeName") or None,
        phase=status.get("phase"),
        gpus=pod_gpus(spec),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        owner=owner,
        created_at=parse_time(meta.get("creationTimestamp")),
        started_at=parse_time(status.get("startTime")),
    )


@dataclass(frozen=True)
class OpsConfig:
    """ConfigMap ``krea-ops/krea-ops-config``: where Prometheus and the exporters are."""

    prometheus_url: str | None = None
    exporters: dict[str, str] = field(default_factory=dict)  # node -> scrape URL
    found: bool = False


@dataclass(frozen=True)
class ApiAnswer:
    """An API server's answer to one request: status, decoded JSON object (None when the
    body is not one), and the ``Retry-After`` header the server sends with some 429s."""

    status: int
    body: dict[str, Any] | None
    reason: str = ""
    retry_after: str | None = None
    method: str = "GET"  # the request's, so a refusal can say what would allow it
    attempts: int = 1  # requests sent: more than one after throttling or a dropped GET
    text: str | None = None  # the body as text, when asked for (``request(raw=True)``)

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    @property
    def message(self) -> str:
        """The ``Status`` message of a refusal ("" when there is none)."""
        return str((self.body or {}).get("message") or "")

    @property
    def status_reason(self) -> str:
        """The ``Status`` reason (``Conflict``, ``TooManyRequests``, ``NotFound`` ...)."""
        return str((self.body or {}).get("reason") or "")


def _throttled_wait(method: str, answer: ApiAnswer) -> float | None:
    """Seconds to wait before sending the request again, None when it is not to be sent
    again: a 429 with ``Retry-After`` that is not a PodDisruptionBudget's refusal (the
    eviction's caller decides about those), or a GET answered 503 with ``Retry-After``;
    the wait is the header's, at most ``MAX_RETRY_AFTER_S``."""
    if answer.status == 429:
        causes = ((answer.body or {}).get("details") or {}).get("causes") or ()
        if any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes):
            return None
    elif not (answer.status == 503 and method == "GET"):
        return None
    if answer.retry_after is None:
        return None
    try:
        seconds = float(answer.retry_after)
    except ValueError:  # an HTTP date: not what the API server sends; wait the most
        seconds = MAX_RETRY_AFTER_S
    if not math.isfinite(seconds):
        seconds = MAX_RETRY_AFTER_S
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _json_object(data: bytes | None) -> dict[str, Any] | None:
    """A response body as the JSON object it holds; None when it holds none."""
    try:
        decoded = orjson.loads(data) if data else None
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


class Expired(Unavailable):
    """410 Gone: a watch (or a list's continue token) asked for a resourceVersion older
    than the API server keeps. A watch cache relists (``kube/watch.py``)."""


class WatchEvents:
    """The events of one watch request, decoded, as the API server streams them
    (newline-delimited JSON, read with the official client's ``iter_resp_lines``).
    ``close`` from another thread ends the iteration (a cache that stops)."""

    def __init__(self, cluster: Cluster, what: str, response: Any) -> None:
        self.cluster = cluster
        self.what = what
        self.response = response  # urllib3's, unread

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import urllib3
        from kubernetes.watch.watch import iter_resp_lines

        started = time.monotonic()
        try:
            for line in iter_resp_lines(self.response):
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if isinstance(event, dict):
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self.cluster._unreachable(self.what, exc, time.monotonic() - started) from None
        except ValueError as exc:  # a line that is not JSON: the stream cannot be trusted
            raise Unavailable(f"{self.what}: the API server sent a watch event that is not "
                              f"JSON ({exc})") from None  # fmt: skip

    def close(self) -> None:
        # shutdown() (urllib3 2.3+) closes the socket under a read blocked in another
        # thread; close() alone leaves it open until the server's next bytes
        for step in ("shutdown", "close"):
            with contextlib.suppress(Exception):
                getattr(self.response, step, lambda: None)()


class Cluster:
    """Snapshots of the cluster through the official client (one ``ApiClient``)."""

    def __init__(
        self,
        api: Any,
        *,
        timeout_s: float = 30.0,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        # Plain GETs through ApiClient.call_api rather than CoreV1Api & co: importing the
        # generated API classes costs about a second, more than most reads take.
        self.api = api
        self.timeout_s = timeout_s
        self.sleep = sleep
        self._versions: dict[tuple[str, str], str] = {}

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    def close(self) -> None:
        """Close the client's connection pool (and its thread pool, when one was made)."""
        self.api.close()

    # -- requests and error translation ---------------------------------------------

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str | int | None] | None = None,
        raw: bool = False,
    ) -> ApiAnswer:
        """One call whatever its HTTP status: writers decide what 409, 429 or 404 mean.

        Only a server that cannot be reached (connection, timeout, TLS) raises, as
        ``Unavailable``; ``refusal()`` turns any other non-2xx answer into the one line
        ``get`` raises. Retried here, and nothing else: a request throttled with a
        ``Retry-After`` (see ``THROTTLE_RETRIES``), and a GET whose connection was
        dropped before any answer (once: a keep-alive connection the server had
        closed). A request that timed out is never sent again: the ``ApiClient``s
        ``krea_ops.kube.client`` makes do no retries of their own (urllib3 would resend
        a timed-out GET three times, four timeouts for one call).
        """
        import urllib3

        params = [(k, str(v)) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "*/*" if raw else "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        attempts, waited = 0, 0.0
        while True:
            attempts += 1
            method_, url, headers_, payload, post = self.api.param_serialize(
                method,
                path,
                query_params=params,
                header_params=dict(headers),
                body=body,
                auth_settings=["BearerToken"],
            )
            try:
                # (connect, read): an API server that went away without refusing (a
                # partition, a stopped VM) costs seconds to find out, not the read timeout
                timeout = (min(CONNECT_TIMEOUT_S, self.timeout_s), self.timeout_s)
                started = time.monotonic()
                resp = self.api.call_api(
                    method_, url, header_params=headers_, body=payload, post_params=post,
                    _request_timeout=timeout,
                )  # fmt: skip
                data = resp.read()
            except urllib3.exceptions.ProtocolError as exc:
                if method == "GET" and attempts == 1:
                    continue  # hung up on without an answer: a GET may be asked again
                raise self._unreachable(what, exc, time.monotonic() - started) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._unreachable(what, exc, time.monotonic() - started) from None
            answer = ApiAnswer(
                status=int(resp.status),
                body=_json_object(data),
                reason=str(resp.reason or ""),
                retry_after=resp.headers.get("Retry-After"),
                method=method.upper(),
                attempts=attempts,
                text=data.decode("utf-8", "replace") if raw and data is not None else None,
            )
            wait = _throttled_wait(method, answer)
            if wait is None or attempts > THROTTLE_RETRIES or waited + wait > self.timeout_s:
                return answer
            self.sleep(wait)
            waited += wait

    @contextlib.contextmanager
    def watch(
        self, what: str, path: str, *, query: dict[str, str | int | None]
    ) -> Iterator[WatchEvents]:
        """A watch request (``query`` holds ``watch=true``, the resourceVersion, the
        ``timeoutSeconds``): its events as they come. ``Expired`` for 410 Gone, the
        usual one-line errors for any other refusal. The read timeout is the watch's own
        plus half a minute: a server that went silent past it is a dropped watch."""
        import urllib3

        params = [(k, str(v)) for k, v in query.items() if v is not None]
        method_, url, headers_, payload, post = self.api.param_serialize(
            "GET",
            path,
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        watch_s = float(query.get("timeoutSeconds") or 0)
        timeout = (min(CONNECT_TIMEOUT_S, self.timeout_s), watch_s + 30 if watch_s else None)
        started = time.monotonic()
        try:
            resp = self.api.call_api(
                method_, url, header_params=headers_, body=payload, post_params=post,
                _request_timeout=timeout,
            )  # fmt: skip
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(what, exc, time.monotonic() - started) from None
        if resp.status != 200:
            body = _json_object(resp.read())
            answer = ApiAnswer(int(resp.status), body, reason=str(resp.reason or ""))
            if answer.status == 410:
                raise Expired(f"{what}: {answer.message or '410 Gone'}")
            # the reader role has no watch: a refused watch is the controller's own role's
            raise self._error_line(what, answer.status, answer.message, answer.reason, write=True)
        events = WatchEvents(self, what, resp.response)
        try:
            yield events
        finally:
            events.close()

    def get(self, what: str, path: str, **query: str | int | None) -> Any:
        """GET ``path`` (``/api/v1/nodes``) with query parameters; the decoded JSON."""
        answer = self.request(what, "GET", path, query=query)
        selector = query.get("labelSelector")
        if answer.status == 400 and selector is not None:
            # The API server parses the selector with the real grammar and says what is
            # wrong; kubectl shows the same text after naming the selector. Bad input (2),
            # not a failure: the command's own part of the request is well-formed.
            raise BadInput(
                f"invalid label selector {str(selector)!r}: {answer.message or 'HTTP 400'}"
            )
        if not answer.ok:
            raise self.refusal(what, answer)
        if answer.body is None:
            raise Unavailable(f"{what}: the API server sent a body that is not a JSON object")
        return answer.body

    def pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> list[str] | None:
        """The lines of a pod's (only) container log, as ``kubectl logs`` prints them
        (``--tail``: the last ``tail_lines``; ``--limit-bytes``: the first bytes); None
        when the pod or its log is gone (404, or 400: the container has not started)."""
        what = f"get log of pod {namespace}/{pod}"
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log"
        answer = self.request(
            what,
            "GET",
            path,
            query={"tailLines": tail_lines, "limitBytes": limit_bytes},
            raw=True,
        )
        if answer.status in (400, 404):
            return None
        if not answer.ok:
            raise self.refusal(what, answer)
        return (answer.text or "").splitlines()

    def refusal(self, what: str, answer: ApiAnswer) -> Exception:
        """The one-line error for an API answer that is not 2xx."""
        return self._error_line(
            what, answer.status, answer.message, answer.reason, write=answer.method != "GET"
        )

    def _error_line(
        self, what: str, status: int, message: str, reason: str, *, write: bool = False
    ) -> Exception:
        if status == 401:
            return Unavailable(
                f"the API server at {self.host} refused the credentials ({what}); "
                "refresh the kubeconfig's token"
            )
        if status == 403:
            hint = RBAC_WRITE_HINT if write else RBAC_HINT
            return Unavailable(f"forbidden: {what} ({message or 'HTTP 403'}); {hint}")
        if status == 404:
            return BadInput(f"{what}: not found")
        if status == 422:  # the object a write would make is invalid: what was asked is wrong
            return BadInput(f"{what}: {message or 'the server found the object invalid'}")
        return Unavailable(f"{what}: HTTP {status} {message or reason}")

    def _unreachable(self, what: str, exc: BaseException, waited_s: float) -> Unavailable:
        """``waited_s``: how long the attempt waited. A stalled TLS handshake times out
        after the connect timeout, and urllib3 reports it as a read timeout too: the line
        says how long it really waited, not the read timeout."""
        import urllib3

        reason: Any = getattr(exc, "reason", None) or exc
        if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
            reason = f"no answer within {max(1, round(waited_s))} s"
        elif isinstance(exc, urllib3.exceptions.ProtocolError) and len(exc.args) > 1:
            reason = exc.args[1]  # RemoteDisconnected('Remote end closed connection ...')
        return Unavailable(
            f"cannot reach the API server at {self.host} ({what}): "
            f"{str(reason).splitlines()[0][:160]}; check --kubeconfig/--context"
        )

    def _pages(self, what: str, path: str, **query: str | None) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            body = self.get(what, path, limit=PAGE_SIZE, **query, **{"continue": token})
            yield from body.get("items") or ()
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return

    # -- nodes and pods -------------------------------------------------------------

    def list_all(self, what: str, path: str, **query: str | None) -> list[dict[str, Any]]:
        """Every object of a (paginated) list, as the API server sends them."""
        return list(self._pages(what, path, **query))

    def nodes(self, label_selector: str | None = None) -> list[NodeInfo]:
        pages = self._pages("list nodes", "/api/v1/nodes", labelSelector=label_selector)
        return [node_info(o) for o in pages]

    def node(self, name: str) -> NodeInfo:
        try:
            return node_info(self.get(f"get node {name}", f"/api/v1/nodes/{quote(name)}"))
        except BadInput:
            raise BadInput(f"node {name} not found (krea-ops nodes list shows the nodes)") from None

    def pods(
        self,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[PodInfo]:
        query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        if namespace:
            path = f"/api/v1/namespaces/{quote(namespace)}/pods"
            items = self._pages(f"list pods in {namespace}", path, **query)
        else:
            items = self._pages("list pods", "/api/v1/pods", **query)
        return [pod_info(o) for o in items]

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Pods bound to one node, terminated ones left out (a field-selected list)."""
        return self.pods(
            field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        )

    def active_pods(self, label_selector: str | None = None) -> list[PodInfo]:
        """Every pod that holds or waits for resources (not Succeeded/Failed)."""
        return self.pods(
            label_selector=label_selector,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )

    # -- krea-ops configuration -----------------------------------------------------

    def ops_config(self) -> OpsConfig:
        """The krea-ops ConfigMap, or an empty OpsConfig when it is absent or forbidden
        (the caller then falls back to flags; it never fails the command)."""
        try:
            body = self.get(
                f"get configmap {OPS_NAMESPACE}/{OPS_CONFIGMAP}",
                f"/api/v1/namespaces/{OPS_NAMESPACE}/configmaps/{OPS_CONFIGMAP}",
            )
        except BadInput:
            return OpsConfig()
        except Unavailable as exc:
            if "forbidden" in str(exc):
                return OpsConfig()
            raise
        data = body.get("data") or {}
        exporters: dict[str, str] = {}
        raw = data.get("exporters")
        if raw:
            try:
                loaded = json.loads(raw)
            except ValueError:
                raise BadInput(
                    f"ConfigMap {OPS_NAMESPACE}/{OPS_CONFIGMAP} key exporters is not JSON; "
                    "fix it with kubectl edit"
                ) from None
            if not isinstance(loaded, dict):
                raise BadInput(
                    f"ConfigMap {OPS_NAMESPACE}/{OPS_CONFIGMAP} key exporters must be a JSON "
                    "object of node name -> URL"
                )
            exporters = {str(k): str(v) for k, v in loaded.items()}
        prometheus_url = (data.get("prometheusURL") or "").strip() or None
        if prometheus_url is not None:
            where = f"ConfigMap {OPS_NAMESPACE}/{OPS_CONFIGMAP} key prometheusURL"
            prometheus_url = check_url(prometheus_url, where)
        return OpsConfig(
            prometheus_url=prometheus_url,
            exporters=exporters,
            found=True,
        )

    # -- custom resources -----------------------------------------------------------

    def custom_version(self, group: str, plural: str, versions: tuple[str, ...]) -> str:
        """The first of ``versions`` the server serves for ``group``/``plural``."""
        key = (group, plural)
        if key in self._versions:
            return self._versions[key]
        try:
            resources = self.get(f"discover {group}", "/apis")
        except BadInput:
            resources = {}
        served = {
            v.get("version")
            for g in resources.get("groups") or ()
            if g.get("name") == group
            for v in g.get("versions") or ()
        }
        for version in versions:
            if version not in served:
                continue
            try:
                listed = self.get(f"discover {group}/{version}", f"/apis/{group}/{version}")
            except BadInput:
                continue
            # every resource this version serves is known now: a read of three Kueue
            # kinds discovers once, not three times (the earliest version that serves
            # a kind is the one recorded: the versions are examined in order)
            for r in listed.get("resources") or ():
                name = r.get("name")
                if isinstance(name, str) and "/" not in name:
                    self._versions.setdefault((group, name), version)
            if key in self._versions:
                return self._versions[key]
        raise MissingCrd(group, plural)

    def custom_objects(
        self,
        group: str,
        plural: str,
        versions: tuple[str, ...],
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        version = self.custom_version(group, plural, versions)
        base = f"/apis/{group}/{version}"
        if namespace:
            path = f"{base}/namespaces/{quote(namespace)}/{plural}"
            what = f"list {plural}.{group} in {namespace}"
        else:
            path, what = f"{base}/{plural}", f"list {plural}.{group}"
        return list(self._pages(what, path, labelSelector=label_selector))


class MissingCrd(Unavailable):
    def __init__(self, group: str, plural: str) -> None:
        hint = (
            "install Kueue (kubectl apply --server-side -f "
            "https://github.com/kubernetes-sigs/kueue/releases/latest/download/manifests.yaml)"
            if group == "kueue.x-k8s.io"
            else f"install the CRD for {plural}.{group}"
        )
        super().__init__(f"the cluster has no {plural}.{group} API; {hint}")
        self.group = group
        self.plural = plural


def connect(kubeconfig: str | None, context: str | None, *, timeout_s: float = 30.0) -> Cluster:
    """A Cluster for the configured kubeconfig/context (nothing is contacted yet)."""
    from krea_ops.kube.client import api_client

    return Cluster(api_client(kubeconfig, context), timeout_s=timeout_s)
