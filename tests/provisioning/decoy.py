"""A decoy HTTP server on loopback that records every request it gets and answers as told:
what a cloud account's endpoint might point at (an internal page, a hanging service)."""

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

INTERNAL_PAGE = b"<html><body>DECOY-INTERNAL-SECRET: the intranet's admin page</body></html>"


@dataclass
class Decoy:
    url: str
    requests: list[str] = field(default_factory=list)
    status: int = 200
    body: bytes = INTERNAL_PAGE
    content_type: str = "text/html"
    delay: float = 0.0


@contextmanager
def decoy_server() -> Iterator[Decoy]:
    decoy = Decoy(url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            decoy.requests.append(f"{self.command} {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(decoy.delay)
            self.send_response(decoy.status)
            self.send_header("Content-Type", decoy.content_type)
            self.send_header("Content-Length", str(len(decoy.body)))
            self.end_headers()
            self.wfile.write(decoy.body)

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    decoy.url = f"http://127.0.0.1:{server.server_port}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield decoy
    finally:
        server.shutdown()
        server.server_close()
