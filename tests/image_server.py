"""A small threaded HTTP server on loopback that serves image files for URL imports, and can be
told to misbehave per path: send slowly, hold (stall) after some bytes until released, announce
a wrong Content-Length or none, answer an error status, or redirect in a loop."""

import contextlib
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    rate: int = 0  # bytes per second; 0 sends at once
    hold_after: int | None = None  # bytes sent before the transfer holds until `release`
    release: threading.Event = field(default_factory=threading.Event)
    length: int | None = None  # the Content-Length announced, when not the body's own
    announced: bool = True  # False: no Content-Length, the body ends when the socket closes
    headers_delay: float = 0  # seconds before the response starts (a stall before headers)
    redirect_to: str = ""
    requests: int = 0
    sent: int = 0  # bytes of the body sent so far, over all requests


class ImageServer:
    """serve(path, ...) and url(path); stop() ends it and releases every held transfer."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                server.answer(self, body=False)

            def do_GET(self) -> None:
                server.answer(self, body=True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def serve(self, path: str, content: bytes | Path = b"", **options: object) -> Route:
        body = content.read_bytes() if isinstance(content, Path) else content
        self.routes[path] = Route(body=body, **options)  # type: ignore[arg-type]
        return self.routes[path]

    def stop(self) -> None:
        self.stopping.set()
        for route in self.routes.values():
            route.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        route = self.routes.get(handler.path.split("?")[0])
        if route is None:
            route = Route(status=404, body=b"no such file\n")
        route.requests += 1
        handler.close_connection = True  # a body cut short ends at the socket's close
        if route.headers_delay:
            self.stopping.wait(route.headers_delay)
        if route.redirect_to:
            handler.send_response(302)
            handler.send_header("Location", route.redirect_to)
            handler.send_header("Content-Length", "0")
            handler.send_header("Connection", "close")
            handler.end_headers()
            return
        handler.send_response(route.status)
        handler.send_header("Content-Type", "application/octet-stream")
        length = route.length if route.length is not None else len(route.body)
        if route.announced:
            handler.send_header("Content-Length", str(length))
        handler.send_header("Connection", "close")
        handler.end_headers()
        if body:
            with contextlib.suppress(OSError):  # the client went away (a cancel, a refusal)
                self._send(handler, route)

    def _send(self, handler: BaseHTTPRequestHandler, route: Route) -> None:
        data, offset = route.body, 0
        step = max(1, route.rate // 20) if route.rate else 1024 * 1024
        while offset < len(data):
            if route.hold_after is not None and offset >= route.hold_after:
                route.release.wait()
                if self.stopping.is_set():
                    return
                route.hold_after = None
            end = min(len(data), offset + step)
            if route.hold_after is not None:
                end = min(end, max(route.hold_after, offset + 1))
            handler.wfile.write(data[offset:end])
            handler.wfile.flush()
            route.sent += end - offset
            offset = end
            if route.rate:
                time.sleep(step / route.rate)
