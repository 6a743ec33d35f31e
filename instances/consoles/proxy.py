"""The console proxy: a websockets server between browsers and the backends' console sockets.

URL: `ws(s)://<proxy>/consoles/<instance id>/<kind>`. An Origin not in
CONSOLEPROXY_ALLOWED_ORIGINS gets HTTP 403; the ticket (subprotocol `zopday.ticket.<ticket>`,
never echoed, or else the first message) must be claimed for the session's user, instance and
kind, else close code 4403. Subprotocols `binary` and `zopday.console` are chosen if offered.
"""

import asyncio
import contextlib
import http
import http.cookies
import json
import logging
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from instances.backends.base import BackendError, ConsoleEndpoint, DialedConsole
from instances.consoles import bridges
from instances.consoles.bridges.links import clipped
from instances.consoles.recording import Recorder
from instances.consoles.registry import ConsoleKind, console_kind
from instances.consoles.sessions import (
    Admission,
    Refused,
    Tally,
    console_admit,
    console_admit_precheck,
    console_session_count,
    console_session_end,
)
from instances.consoles.tickets import ticket_from_subprotocols

log = logging.getLogger("zopday.consoleproxy")

ROUTE = re.compile(r"/consoles/(?P<instance>[0-9]{1,18})/(?P<kind>[a-z]{1,16})")
TERMINAL_SUBPROTOCOL = Subprotocol("zopday.console")
BINARY_SUBPROTOCOL = Subprotocol("binary")
CLOSE_REFUSED = 4403
FIRST_MESSAGE_SECONDS = 5
SERVER_OPTIONS = {
    # A connection that has not finished its opening handshake by then is dropped: idle or
    # dribbling junk holds a socket for seconds, not for good.
    "open_timeout": 5,
    # Connections the kernel completes while the loop is busy wait here; past it their SYNs
    # are dropped and a browser retries only 1, 3, 7 s later (asyncio's default is 100).
    "backlog": 4096,
    "compression": None,  # permessage-deflate costs a lot of CPU for console traffic
    "max_size": 4 * 2**20,
    "max_queue": 64,
    "write_limit": 2**20,
    "ping_interval": 20,  # the proxy pings idle browsers; the page pings the proxy in turn
    "ping_timeout": 20,
}


class Locator(Protocol):
    """Where a machine's console sockets and serial log are (the backends, or a test's fakes)."""

    def socket(self, backend: str, machine_id: str, socket_kind: str) -> ConsoleEndpoint: ...

    def serial_log(self, backend: str, machine_id: str) -> Path | None: ...


class BackendLocator:
    """The real thing: asks the instance's backend."""

    def socket(self, backend: str, machine_id: str, socket_kind: str) -> ConsoleEndpoint:
        from instances.backends import backend_named

        return backend_named(backend).console_socket(machine_id, socket_kind)

    def serial_log(self, backend: str, machine_id: str) -> Path | None:
        from instances.backends import backend_named

        return backend_named(backend).serial_log(machine_id)


@dataclass(frozen=True)
class Route:
    instance_id: int
    kind: ConsoleKind


class ConsoleProxy:
    def __init__(
        self,
        *,
        allowed_origins: Sequence[str] | None = None,
        locator: Locator | None = None,
        history_bytes: int | None = None,
        linger: float = 15.0,
    ) -> None:
        origins = (
            settings.CONSOLEPROXY_ALLOWED_ORIGINS if allowed_origins is None else allowed_origins
        )
        self.allowed_origins = frozenset(origin.rstrip("/") for origin in origins)
        self.locator: Locator = locator or BackendLocator()
        self.hubs = bridges.HubRegistry(
            history_bytes=settings.CONSOLE_HISTORY_BYTES
            if history_bytes is None
            else history_bytes,
            linger=linger,
        )
        self._routes: weakref.WeakKeyDictionary[ServerConnection, Route] = (
            weakref.WeakKeyDictionary()
        )

    def serve(self, host: str | None, port: int, **options: object) -> Server:
        return serve(
            self.handler,
            host,
            port,
            process_request=self.process_request,
            select_subprotocol=self.select_subprotocol,
            create_connection=bridges.ConsoleConnection,
            **{**SERVER_OPTIONS, **options},  # type: ignore[arg-type]
        )

    # ---- handshake -----------------------------------------------------------------------

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "ok\n")
        match = ROUTE.fullmatch(request.path)
        kind = console_kind(match["kind"]) if match else None
        if match is None or kind is None:
            return connection.respond(http.HTTPStatus.NOT_FOUND, "No such console.\n")
        origin = request.headers.get("Origin", "")
        if origin.rstrip("/") not in self.allowed_origins:
            log.warning("refused a console websocket from origin %r", origin)
            return connection.respond(
                http.HTTPStatus.FORBIDDEN, "This origin may not open consoles.\n"
            )
        self._routes[connection] = Route(int(match["instance"]), kind)
        return None

    def select_subprotocol(
        self, connection: ServerConnection, offered: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        for protocol in (BINARY_SUBPROTOCOL, TERMINAL_SUBPROTOCOL):
            if protocol in offered:
                return protocol
        return None

    # ---- sessions ------------------------------------------------------------------------

    async def handler(self, ws: ServerConnection) -> None:
        route = self._routes.pop(ws, None)
        if route is None or ws.request is None:
            await ws.close(1011, "No route.")
            return
        ticket = ticket_from_subprotocols(_offered_subprotocols(ws.request))
        session_key = _session_key(ws.request)
        ws.request.headers.clear()  # the handshake's headers weigh ~5 KiB a session: let go
        ws.response = None
        if ticket is None:
            ticket = await _first_message(ws)
        try:
            console_admit_precheck(ticket=ticket or "", session_key=session_key)
            admission = await sync_to_async(console_admit)(
                ticket=ticket or "",
                session_key=session_key,
                instance_id=route.instance_id,
                kind=route.kind,
            )
        except Refused as refused:
            log.info(
                "refused a %s console of instance %s: %s",
                route.kind.name,
                route.instance_id,
                refused,
            )
            await ws.close(CLOSE_REFUSED, str(refused)[:120])
            return
        log.info(
            "console session %s: %s opened %s of %s%s",
            admission.session_id, admission.username, route.kind.name, admission.machine_id,
            " (read-only)" if admission.read_only else "",
        )  # fmt: skip
        recorder: Recorder | None = None
        reason, to_guest, from_guest = "closed", 0, 0
        socket_path: ConsoleEndpoint | None = None
        tally = Tally()
        counting = asyncio.create_task(_write_counts(admission.session_id, tally))
        try:
            socket_path = await sync_to_async(self.locator.socket, thread_sensitive=False)(
                admission.backend, admission.machine_id, route.kind.socket_kind
            )
            if route.kind.is_terminal:
                if admission.recording is not None:
                    recorder = Recorder(
                        admission.recording,
                        title=f"{admission.username}: {route.kind.label} console of "
                        f"{admission.machine_id}",
                    )
                reason, to_guest, from_guest = await self._terminal(
                    ws, admission, socket_path, recorder, tally
                )
            else:
                reason, to_guest, from_guest = await bridges.run_vnc(
                    ws, admission, socket_path, tally
                )
        except (bridges.Unavailable, BackendError) as unavailable:
            reason = str(unavailable)
            dialed = isinstance(socket_path, DialedConsole)
            await _refuse(ws, reason, dialed=dialed, terminal=route.kind.is_terminal)
        except Exception as error:  # the session ends; the proxy goes on
            log.exception("console session %s failed", admission.session_id)
            reason = f"error: {error}"
            with contextlib.suppress(ConnectionClosed):
                await ws.close(1011, "Console error.")
        finally:
            counting.cancel()
            if recorder is not None:
                recorder.flush()  # in the loop: it owns the flush timer
                await asyncio.to_thread(recorder.finish)
            await sync_to_async(console_session_end)(
                session_id=admission.session_id,
                bytes_to_guest=to_guest,
                bytes_from_guest=from_guest,
                reason=reason,
            )
            log.info("console session %s ended: %s", admission.session_id, reason)

    async def _terminal(
        self,
        ws: ServerConnection,
        admission: Admission,
        socket_path: ConsoleEndpoint,
        recorder: Recorder | None,
        tally: Tally,
    ) -> tuple[str, int, int]:
        kind = admission.kind
        serial_log = None
        if kind.history_from_serial_log:
            serial_log = await sync_to_async(self.locator.serial_log, thread_sensitive=False)(
                admission.backend, admission.machine_id
            )
        hub = await self.hubs.hub(
            (admission.backend, admission.machine_id, kind.name), socket_path, serial_log
        )
        viewer = bridges.Viewer(ws, admission, recorder)
        tally.read = lambda: (viewer.bytes_in, viewer.bytes_out)
        reason = await bridges.run_terminal(ws, hub, viewer)
        return reason, viewer.bytes_in, viewer.bytes_out


async def _write_counts(session_id: int, tally: Tally) -> None:
    """Every CONSOLE_COUNT_SECONDS, the session's bytes so far onto its record, when they grew."""
    written = (0, 0)
    while True:
        await asyncio.sleep(settings.CONSOLE_COUNT_SECONDS)
        counts = tally.read()
        if counts != written:
            await sync_to_async(console_session_count)(
                session_id=session_id, bytes_to_guest=counts[0], bytes_from_guest=counts[1]
            )
            written = counts


async def _refuse(ws: ServerConnection, reason: str, *, dialed: bool, terminal: bool) -> None:
    """Say in full why the console would not open, then close: a channel of its own (a cloud's
    exec) is not redialled by the page, a socket of this console's hosts is."""
    code = bridges.CLOSE_SESSION_ENDED if dialed else bridges.CLOSE_BACKEND_GONE
    with contextlib.suppress(ConnectionClosed):
        if terminal:  # noVNC takes no text frames
            await ws.send(json.dumps({"type": "error", "message": reason}))
        await ws.close(code, clipped(reason))


def _offered_subprotocols(request: Request) -> list[str]:
    return [
        protocol.strip()
        for header in request.headers.get_all("Sec-WebSocket-Protocol")
        for protocol in header.split(",")
        if protocol.strip()
    ]


def _session_key(request: Request) -> str | None:
    cookies = http.cookies.SimpleCookie()
    with contextlib.suppress(http.cookies.CookieError):
        for header in request.headers.get_all("Cookie"):
            cookies.load(header)
    morsel = cookies.get(settings.SESSION_COOKIE_NAME)
    return morsel.value if morsel is not None else None


async def _first_message(ws: ServerConnection) -> str | None:
    """The ticket of a client that could not put it in the subprotocol list."""
    try:
        async with asyncio.timeout(FIRST_MESSAGE_SECONDS):
            message = await ws.recv()
    except (TimeoutError, ConnectionClosed):
        return None
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    return message.strip()[:100]


async def run_forever(
    proxy: ConsoleProxy, host: str | None, port: int, stop: asyncio.Future[None]
) -> None:
    async with proxy.serve(host, port):
        await stop
    await proxy.hubs.close_all_and_wait()
