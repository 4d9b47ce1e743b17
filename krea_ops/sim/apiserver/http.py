"""HTTPS front of the simulated API server, and the kubeconfig that points at it.

HTTPS on loopback by default with a bearer token (client-go sends tokens only over TLS)
and a self-signed certificate the kubeconfig trusts; watches stream newline-delimited
JSON events with chunked transfer encoding, as the real server does.
"""

from __future__ import annotations

import ssl
import sys
import threading
from typing import Any

from krea_ops.errors import BadInput
from krea_ops.serving import ConnectionTrackingServer, TlsHandler
from krea_ops.sim.apiserver.server import ApiServer, Request, Response, WatchStream

# Past the API server's own 3 MiB limit (which answers with a Status), the connection
# is not worth reading.
_BODY_LIMIT = 8 * 1024 * 1024


class _Handler(TlsHandler):
    api: ApiServer
    server_version = "krea-sim-apiserver"

    def _serve(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            # kubectl create --raw -f FILE streams its body (Transfer-Encoding: chunked,
            # no Content-Length): read it all, so the connection stays in step for the
            # next request on it.
            chunked = self._read_chunked()
            if chunked is None:
                self.close_connection = True
                self.send_error(413)
                return
            body = chunked
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _BODY_LIMIT:
                self.close_connection = True
                self.send_error(413)
                return
            body = self.rfile.read(length) if length else b""
        req = Request.build(self.command, self.path, dict(self.headers.items()), body)
        result = self.api.handle(req)
        if isinstance(result, Response) and result.drop:
            # the fault switch's hang-up: no status line, no body, the socket closed
            self.close_connection = True
            return
        if isinstance(result, Response):
            self._write(result)
        else:
            self._stream(result)

    def _read_chunked(self) -> bytes | None:
        """An HTTP/1.1 chunked body (RFC 9112 7.1), trailers skipped; None past the limit
        (the rest is not read: the connection is closed after the answer)."""
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields
                return b"".join(parts)
            total += size
            if total > _BODY_LIMIT:
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _write(self, resp: Response) -> None:
        self.send_response(resp.code)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in resp.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(resp.body)

    def _stream(self, watch: WatchStream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", watch.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            for chunk in watch.events():
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            return
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _Server(ConnectionTrackingServer):
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            return  # a client that went away or spoke plain HTTP: nothing to report
        super().handle_error(request, client_address)


class HttpFront:
    """Serves an ApiServer on host:port (port 0 picks a free one) on a background thread,
    over TLS when given a context."""

    def __init__(
        self,
        api: ApiServer,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        handler = type("Handler", (_Handler,), {"api": api})
        try:
            self._server = _Server((host, port), handler)
        except OSError as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
            self.scheme = "https"
        self.host, self.port = (
            str(self._server.server_address[0]),
            int(self._server.server_address[1]),
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="sim-apiserver-http", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving, and hang up on the clients still connected: a stopped API
        server must look stopped to a client holding a keep-alive connection, as a
        real one that exits does."""
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        self._thread.join(timeout=5)
