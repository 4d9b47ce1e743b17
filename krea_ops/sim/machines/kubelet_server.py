"""The simulated kubelets' HTTPS endpoint: ``/containerLogs``, what ``kubectl logs`` reaches
through the upstream kube-apiserver.

kube-apiserver serves ``GET /api/v1/namespaces/NS/pods/NAME/log`` by validating the
``PodLogOptions``, choosing the container, and proxying to the node's kubelet
(pkg/registry/core/pod/strategy.go ``LogLocation``)::

    https://<node address>:<status.daemonEndpoints.kubeletEndpoint.Port>
        /containerLogs/<namespace>/<pod>/<container>?<query>

the query holding only what was asked for: ``follow=true``, ``previous=true``,
``timestamps=true``, ``sinceSeconds=N``, ``sinceTime=<RFC 3339, whole seconds>``
(``opts.SinceTime.Format(time.RFC3339)``), ``tailLines=N``, ``limitBytes=N``, and
``stream=<All|Stdout|Stderr>`` only with the ``PodLogsQuerySplitStreams`` gate (alpha, off
by default). A kubelet's answer other than 2xx becomes the API error
(``GenericHttpResponseChecker``, staging/src/k8s.io/apiserver/pkg/registry/generic/rest/
response_checker.go): 400 becomes ``NewBadRequest(body)``, 500 an InternalError, any other
code a Status with that code and the body as its message.

:class:`KubeletServer` answers that request as the kubelet's ``getContainerLogs``
(pkg/kubelet/server/server.go) does, over the same log store the embedded API server reads
(``krea_ops.sim.common.podlogs.for_state``), the pod read through the official client:

- the query decoded as the kubelet's ``legacyscheme.ParameterCodec`` does (the legacy
  ``tail`` parameter standing for ``tailLines``, ``tail=all`` for none; a boolean false
  only when absent, ``0`` or ``false``; a number or time that does not parse:
  400 ``{"message": "Unable to decode query."}``);
- ``ValidatePodLogOptions`` (pkg/apis/core/v1/validation): 422
  ``{"message": "Invalid request."}``;
- a pod this kubelet does not run: 404 ``pod %q does not exist``; a container not in its
  spec: 404 ``container %q not found in pod %q``;
- ``stream`` other than ``All``: 400 ``unable to return the given log stream: %q. Please
  enable PodLogsQuerySplitStreams feature gate in kubelet`` (the gate's default);
- the instance chosen by ``validateContainerLogStatus`` (pkg/kubelet/kubelet_pods.go),
  its refusals 400 with their text (``previous terminated container %q in pod %q not
  found``, ...): :func:`krea_ops.sim.common.podlogs.container_log`;
- the log itself with ``Transfer-Encoding: chunked`` (set by ``getContainerLogs`` just
  before ``GetKubeletContainerLogs``, so Go's net/http sniffs no ``Content-Type``),
  flushed as it is written with ``follow=true`` until the container instance stops
  running.

Errors are the plain text ``response.WriteError`` writes (go-restful: the status and
``err.Error()``), with the ``Content-Type`` net/http sniffs (``text/plain;
charset=utf-8``), except the refusals of ``validateContainerLogStatus``, which come after
``Transfer-Encoding: chunked`` was set: chunked, and no ``Content-Type`` (net/http sniffs
only ``!hasCE && !haveType && !hasTE``). ``GET /healthz`` answers ``ok`` as the kubelet's
healthz handler does. There is no authentication or authorization (a kubelet with
``--anonymous-auth`` and ``AlwaysAllow``): it listens on loopback only.
"""

from __future__ import annotations

import ipaddress
import json
import re
import ssl
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from krea_ops.kube import times
from krea_ops.serving import ConnectionTrackingServer, TlsHandler
from krea_ops.sim.common import podlogs
from krea_ops.sim.common.tls import ensure_certificate, server_context

Obj = dict[str, Any]
CONTAINER_LOGS = "/containerLogs/"
_INT64 = re.compile(r"[+-]?[0-9]+")
_LOG_STREAMS = ("Stdout", "Stderr", "All")  # v1.LogStreamStdout, ...Stderr, ...All
_API_TIMEOUT_S = 10.0
_SNIFFED_TEXT = {"Content-Type": "text/plain; charset=utf-8"}  # http.DetectContentType


class _Answer(Exception):
    """An error answer: the status and the text the kubelet writes; ``chunked`` for those
    written after ``Transfer-Encoding: chunked`` was set."""

    def __init__(self, code: int, text: str, chunked: bool = False) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.chunked = chunked


def _q(text: str) -> str:
    """Go's ``%q`` for the names that reach it (JSON's quoting is the same for them)."""
    return json.dumps(text, ensure_ascii=False)


def _decode_bool(values: list[str] | None) -> bool:
    """``Convert_Slice_string_To_bool`` (apimachinery/pkg/runtime/conversion.go): "Only
    the absence of a value (i.e. zero-length slice), a value of "false", or a value of "0"
    resolve to false. Any other value (including empty string) resolves to true." """
    if not values:
        return False
    return not (values[0] == "0" or values[0].lower() == "false")


def _decode_int64(values: list[str] | None) -> int | None:
    if not values:
        return None
    raw = values[0]
    if not _INT64.fullmatch(raw):
        raise _Answer(400, '{"message": "Unable to decode query."}')
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        raise _Answer(400, '{"message": "Unable to decode query."}')
    return value


def _decode_options(query: str) -> tuple[podlogs.LogOptions, str | None]:
    """The query as the kubelet decodes and validates it: the options, and ``stream``."""
    params = parse_qs(query, keep_blank_values=True)
    # backwards compatibility for the "tail" query parameter; "all" is the same as
    # omitting tail
    tail_param = (params.get("tail") or [""])[0]
    if tail_param:
        params["tailLines"] = [tail_param]
        if tail_param == "all":
            del params["tailLines"]
    tail = _decode_int64(params.get("tailLines"))
    limit = _decode_int64(params.get("limitBytes"))
    since_s = _decode_int64(params.get("sinceSeconds"))
    since_time: str | None = None
    since_time_set = "sinceTime" in params and bool(params["sinceTime"])
    if since_time_set:
        raw = params["sinceTime"][0]
        # metav1.Time.UnmarshalQueryParameter: "" and "null" are the zero time
        if raw not in ("", "null"):
            if times.parse_time(raw) is None:
                raise _Answer(400, '{"message": "Unable to decode query."}')
            since_time = raw
    stream = params["stream"][0] if params.get("stream") else None
    invalid = (
        (tail is not None and tail < 0)
        or (limit is not None and limit < 1)
        or (since_s is not None and since_time_set)
        or (since_s is not None and since_s < 1)
        or (stream is not None and stream not in _LOG_STREAMS)
    )
    if invalid:
        raise _Answer(422, '{"message": "Invalid request."}')
    options = podlogs.LogOptions(
        previous=_decode_bool(params.get("previous")),
        since_seconds=since_s,
        since_time=since_time,
        timestamps=_decode_bool(params.get("timestamps")),
        tail_lines=tail,
        limit_bytes=limit,
        follow=_decode_bool(params.get("follow")),
    )
    return options, stream


def _has_container(pod: Obj, name: str) -> bool:
    """``kubecontainer.GetContainerSpec``: a container, init container or ephemeral
    container of that name."""
    spec = pod.get("spec") or {}
    return any(
        c.get("name") == name
        for key in ("containers", "initContainers", "ephemeralContainers")
        for c in spec.get(key) or []
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(TlsHandler):
    kubelet: KubeletServer
    server_version = "krea-sim-kubelet"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            # k8s.io/apiserver/pkg/server/healthz: handleRootHealth
            self._send(
                200,
                b"ok",
                {"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"},
            )
            return
        if not url.path.startswith(CONTAINER_LOGS):
            self._not_found()
            return
        try:
            self._container_logs(url.path[len(CONTAINER_LOGS) :], url.query)
        except _Answer as answer:
            if answer.chunked:
                self._send_chunked(answer.code, [answer.text.encode()])
            else:
                self._send(answer.code, answer.text.encode(), _SNIFFED_TEXT)

    def _other(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":  # the healthz handler answers any method
            self.do_GET()
        elif path.startswith(CONTAINER_LOGS):
            # GETOnlyRestfulFilter
            self._send(405, b"Method Not Allowed", {"Allow": "GET", **_SNIFFED_TEXT})
        else:
            self._not_found()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _other

    def _not_found(self) -> None:
        # go-restful's answer for a path no route matches
        self._send(404, b"404: Page Not Found", _SNIFFED_TEXT)

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _container_logs(self, rest: str, query: str) -> None:
        parts = [unquote(p) for p in rest.split("/")]
        if len(parts) != 3:
            self._not_found()
            return
        namespace, name, container = parts
        if not name:
            raise _Answer(400, '{"message": "Missing podID."}')
        if not container:
            raise _Answer(400, '{"message": "Missing container name."}')
        if not namespace:
            raise _Answer(400, '{"message": "Missing podNamespace."}')
        options, stream = _decode_options(query)
        kubelet = self.kubelet
        pod = kubelet.pod(namespace, name)
        if pod is None:
            raise _Answer(404, f"pod {_q(name)} does not exist")
        if not _has_container(pod, container):
            raise _Answer(404, f"container {_q(container)} not found in pod {_q(name)}")
        if stream is not None and stream != "All":
            raise _Answer(
                400,
                f"unable to return the given log stream: {_q(stream)}. Please enable "
                "PodLogsQuerySplitStreams feature gate in kubelet",
            )

        def current() -> Obj | None:
            nonlocal pod
            try:
                now = kubelet.pod(namespace, name)
            except _Answer:
                return pod  # the API server did not answer: as last seen
            pod = now
            return now

        try:
            log = podlogs.container_log(
                kubelet.store, pod, container, options, current=current, closing=kubelet.closing
            )
        except podlogs.ContainerLogError as exc:
            raise _Answer(400, str(exc), chunked=True) from None
        if isinstance(log, bytes):
            self._send_chunked(200, [log])
        else:
            self._send_chunked(200, log)
            self.close_connection = True

    def _send_chunked(self, code: int, chunks: Iterable[bytes]) -> None:
        """An answer with ``Transfer-Encoding: chunked`` and no ``Content-Type``, each
        chunk flushed as it comes; a client that went away (or ``close()`` hanging up on
        it) ends it."""
        self.send_response(code)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


class _Server(ConnectionTrackingServer):
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            return  # a client that went away or spoke plain HTTP: nothing to report
        super().handle_error(request, client_address)


class KubeletServer:
    """The kubelet's HTTPS endpoint for the cluster whose state lies in ``state_dir``:
    ``/containerLogs/{namespace}/{pod}/{container}`` and ``/healthz``, on ``host:port``
    (loopback only; port 0 picks a free one) on background threads, with a self-signed
    certificate kept in ``pki_dir`` (``<state_dir>/pki/kubelet`` by default; the CA to
    trust is ``ca_cert``). Pods are read with ``api_client`` (a
    ``kubernetes.client.ApiClient``); with ``node`` only the pods bound to that node are
    this kubelet's, else any scheduled pod is.

    ``with KubeletServer(state_dir, client) as kubelet: kubelet.url``; ``close()`` ends the
    followed logs, stops listening and hangs up on every client.
    """

    def __init__(
        self,
        state_dir: Path | str,
        api_client: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        pki_dir: Path | str | None = None,
        node: str | None = None,
    ) -> None:
        if not _loopback(host):
            raise ValueError(f"the simulated kubelet listens on loopback only, not {host}")
        from kubernetes import client

        self.state_dir = Path(state_dir)
        self.node = node
        self.store = podlogs.for_state(self.state_dir)
        self.closing = threading.Event()
        self._core = client.CoreV1Api(api_client)
        directory = Path(pki_dir) if pki_dir is not None else self.state_dir / "pki" / "kubelet"
        self.ca_cert, key = ensure_certificate(directory, (host,), name="kubelet")
        context = server_context(self.ca_cert, key)
        context.set_alpn_protocols(["http/1.1"])
        handler = type("Handler", (_Handler,), {"kubelet": self})
        self._server = _Server((host, port), handler)
        self._server.socket = context.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.host = str(self._server.server_address[0])
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="sim-kubelet", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def pod(self, namespace: str, name: str) -> Obj | None:
        """The pod as the API server has it now, None when it is not this kubelet's
        (absent, not scheduled, or bound to another node); raises an answer of 500 when the
        API server does not answer."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            raw: Any = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=_API_TIMEOUT_S
            )
            pod: Obj = json.loads(raw.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _Answer(500, f"reading pod {_q(name)}: {exc.status} {exc.reason}") from None
        except (HTTPError, OSError, ValueError) as exc:
            raise _Answer(500, f"reading pod {_q(name)}: {exc}") from None
        bound = (pod.get("spec") or {}).get("nodeName")
        if not bound or (self.node is not None and bound != self.node):
            return None
        return pod

    def close(self) -> None:
        """End the followed logs, stop listening and hang up on the clients still
        connected: nothing is left listening on the port."""
        if self.closing.is_set():
            return
        self.closing.set()
        self.store.wake()
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        self._thread.join(timeout=5)

    def __enter__(self) -> KubeletServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
