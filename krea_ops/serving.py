"""The HTTP server our endpoints run on (the exporter's /metrics, the simulated API server):
a thread per connection, and stopping it closes the keep-alive connections too.

``ThreadingHTTPServer.shutdown()`` stops accepting, but a client holding a persistent
connection keeps getting answers from its handler thread: Prometheus scraping a "dead"
exporter, or the dashboard reading a stopped API server, would see it alive.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ConnectionTrackingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with self._open_lock:
            self._open.add(conn)
        return conn, addr

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Hang up on every client still connected (after ``shutdown()``)."""
        with self._open_lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class TlsHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive over TLS, quiet: what the simulated API server and the
    simulated kubelets' endpoint serve with."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, a keep-alive client
    # waits out the peer's delayed ACK (~40 ms) on every request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        # The TLS handshake runs here, on the connection's own thread, not in accept().
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(30)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
