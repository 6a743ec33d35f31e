"""The web server `bin/zop run` starts: waitress, with deadlines for clients that send slowly.

Waitress reads every request whole in one I/O loop before a worker thread sees it, so a client
that drips its headers or body holds a socket, not a thread (gunicorn's sync workers and gthread
threads each wait on one such client). Run as `python -m zopday.webserver --host H --port P`.
"""

import argparse
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.utilities import Error

from instances.process_limits import allow_open_files

log = logging.getLogger("zopday.webserver")

THREADS = 8  # requests run at once; the rest wait, read whole, in the I/O loop
CONNECTION_LIMIT = 1000  # past it new connections wait in the listen backlog
HEADER_SECONDS = 10  # from a request's first byte to the end of its headers
IDLE_SECONDS = 20  # a body (or a kept-alive connection) that sends nothing for this long
BODY_GRACE_SECONDS = 30  # then a body must have come at MIN_BODY_RATE on average
MIN_BODY_RATE = 1024  # bytes a second
# Waitress keeps a body whole (on disk past 512 KiB) before Django sees it: only an image
# upload by a user who may upload there may send one larger than a form's, a few at a time.
SMALL_BODY_BYTES = 16 * 2**20
LARGE_BODIES = 2  # held at once by one server; more are answered 503


class BoundedAdjustments:
    """Waitress's adjustments with one request's own body limit."""

    def __init__(self, adjustments: Any, max_request_body_size: int) -> None:
        self.adjustments, self.max_request_body_size = adjustments, max_request_body_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adjustments, name)


class ServiceUnavailable(Error):
    code = 503
    reason = "Service Unavailable"


class BodyLimitParser(HTTPRequestParser):
    """A request parser that holds a body larger than a form's only for an image upload by a
    user who may upload there, while the server holds fewer than LARGE_BODIES others."""

    adj: Any  # waitress's Adjustments, or a request's BoundedAdjustments
    holds_slot = False

    def __init__(self, adj: Any, large_bodies: threading.Semaphore) -> None:
        super().__init__(adj)
        self.large_bodies = large_bodies

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if not (self.chunked or self.content_length > SMALL_BODY_BYTES):
            return
        if not self.may_send_large_body():
            limit = min(SMALL_BODY_BYTES, self.adj.max_request_body_size)
            self.adj = BoundedAdjustments(self.adj, limit)
        elif self.large_bodies.acquire(blocking=False):
            self.holds_slot = True
        else:
            self.error = ServiceUnavailable("Too many uploads at once: try again shortly.")
            self.completed = True

    def may_send_large_body(self) -> bool:
        """Asked in the I/O loop, once a request's headers announce a large body: so a failed
        check refuses, and the loop's own database connection is closed after it."""
        if self.command != "POST":
            return False
        from instances.services.uploads import upload_allowed  # after django.setup()

        try:
            return upload_allowed(
                path=self.path,
                cookie_header=self.headers.get("COOKIE", ""),
                authorization_header=self.headers.get("AUTHORIZATION", ""),
            )
        except Exception:
            log.exception("refused a large body: its credentials could not be checked")
            return False
        finally:
            connections.close_all()  # this thread's only: the I/O loop holds none between

    def close(self) -> None:
        super().close()
        self.release_slot()

    def release_slot(self) -> None:
        if self.holds_slot:
            self.holds_slot = False
            self.large_bodies.release()


class DeadlineChannel(HTTPChannel):
    """A connection that notes when its request began and how much of it arrived."""

    request_started = 0.0
    request_bytes = 0
    server: "DeadlineServer"

    def parser_class(self, adj: Any) -> BodyLimitParser:
        """Waitress makes each request's parser with this: one that knows the server's slots."""
        return BodyLimitParser(adj, self.server.large_bodies)

    def del_channel(self, map: Any = None) -> None:
        super().del_channel(map)
        if isinstance(self.request, BodyLimitParser):  # a body cut off; served ones are closed
            self.request.release_slot()

    def received(self, data: bytes) -> bool:
        reading = self.request
        accepted = bool(super().received(data))
        if self.request is not None and self.request is not reading:  # a new one began
            self.request_started, self.request_bytes = time.monotonic(), 0
        self.request_bytes += len(data)
        return accepted

    def too_slow(self, now: float) -> str | None:
        """Why the request being read is cut off, if it is."""
        request = self.request
        if request is None or request.completed or self.requests:
            return None
        elapsed = now - self.request_started
        if not request.headers_finished:
            return "headers" if elapsed > HEADER_SECONDS else None
        if elapsed > BODY_GRACE_SECONDS and self.request_bytes < MIN_BODY_RATE * elapsed:
            return "body"
        return None


class DeadlineServer(TcpWSGIServer):
    """Waitress's TCP server; its once-a-second sweep also closes requests sent too slowly."""

    channel_class = DeadlineChannel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.large_bodies = threading.Semaphore(LARGE_BODIES)
        super().__init__(*args, **kwargs)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # idle connections (channel_timeout)
        monotonic, cut = time.monotonic(), {"headers": 0, "body": 0}
        for channel in list(self.active_channels.values()):
            if not channel.will_close and (part := channel.too_slow(monotonic)):
                channel.will_close = True
                cut[part] += 1
        if any(cut.values()):  # one line a sweep, however many an attack opens
            log.warning(
                "closed %s connection(s) whose headers and %s whose body came too slowly",
                cut["headers"], cut["body"],
            )  # fmt: skip


def server_options(max_body_bytes: int) -> dict[str, Any]:
    """Waitress's adjustments: poll() (select() stops at 1024 sockets), the limits above."""
    return {
        "threads": THREADS,
        "connection_limit": CONNECTION_LIMIT,
        "channel_timeout": IDLE_SECONDS,
        "cleanup_interval": 1,
        "asyncore_use_poll": True,
        "max_request_body_size": max_body_bytes,
        "ident": "zopday",
        # X-Forwarded-Proto reaches Django as before: its SECURE_PROXY_SSL_HEADER decides on it
        "clear_untrusted_proxy_headers": False,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()

    from zopday.wsgi import application

    # an image upload is the largest body; a form's fields come with it
    max_body = (settings.ZOPDAY_IMAGE_UPLOAD_MAX_GB + 1) * 2**30
    allow_open_files(CONNECTION_LIMIT + 256)  # the database, logs and uploads need some too
    server = DeadlineServer(application, host=args.host, port=args.port, **server_options(max_body))
    log.info("serving on http://%s:%s/", server.effective_host, server.effective_port)
    server.run()


if __name__ == "__main__":
    main()
