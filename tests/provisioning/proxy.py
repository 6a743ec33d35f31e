"""A small HTTP proxy in front of moto that can hold one kind of request for a while: it makes
"the worker is in the middle of a cloud call" a moment a test can act on."""

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class SlowProxy:
    def __init__(self, upstream: str, hold: bytes, seconds: float) -> None:
        self.upstream = urlsplit(upstream)
        self.hold, self.seconds = hold, seconds
        self.held = threading.Event()  # the held request arrived
        self.forwarded = threading.Event()  # ... and reached moto afterwards
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                holding = proxy.hold in body and not proxy.held.is_set()
                if holding:
                    proxy.held.set()
                    threading.Event().wait(proxy.seconds)
                connection = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=30
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                connection.request(self.command, self.path, body, headers)
                response = connection.getresponse()
                data = response.read()
                if holding:
                    proxy.forwarded.set()
                try:
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the caller died while we held its request

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
