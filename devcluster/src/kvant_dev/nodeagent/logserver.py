"""The kubelet's /containerLogs endpoint, so `kubectl logs` and the pods/log API work."""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# (namespace, pod, container, previous) -> log file, or None when unknown
LogLocator = Callable[[str, str, str, bool], Path | None]


def serve_logs(
    host: str, port: int, *, cert: Path, key: Path, ca: Path, locate: LogLocator
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            parts = url.path.strip("/").split("/")
            query = urllib.parse.parse_qs(url.query)
            if len(parts) != 4 or parts[0] != "containerLogs":
                self.send_error(404, "only /containerLogs/{namespace}/{pod}/{container} is served")
                return
            previous = query.get("previous", ["false"])[0] == "true"
            path = locate(parts[1], parts[2], parts[3], previous)
            if path is None or not path.exists():
                self.send_error(404, f"no logs for {'/'.join(parts[1:])}")
                return
            lines = path.read_bytes().splitlines(keepends=True)
            if "tailLines" in query:
                lines = lines[-int(query["tailLines"][0]) :] if int(query["tailLines"][0]) else []
            body = b"".join(lines)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(str(ca))
    context.verify_mode = ssl.CERT_REQUIRED  # only the apiserver (a client cert from our CA) may read logs
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="logserver", daemon=True).start()
    return server
