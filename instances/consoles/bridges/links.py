"""The proxy's ends of backend console sockets and websockets, with flow control both ways."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from websockets.asyncio.server import ServerConnection, broadcast
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

BACKEND_WRITE_LIMIT = 1 << 20
SLOW_VIEWER_SECONDS = 10  # a viewer whose buffer stays full this long is dropped, not waited for
CLOSE_BACKEND_GONE = 4410  # the browser reconnects with a fresh ticket, after a pause
CLOSE_SESSION_ENDED = 4411  # a session channel ended: the browser offers a new one, no reconnect


class Unavailable(Exception):
    """The backend's console socket cannot be reached (the machine is not running)."""


class Link(Protocol):
    """The proxy's end of a console's backend connection: a unix socket or an engine's
    websocket (remote.py)."""

    closed: bool

    def write(self, data: bytes, sender: ServerConnection) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class BackendLink(asyncio.Protocol):
    """The proxy's end of one backend console socket, with write flow control."""

    def __init__(self, on_data: Callable[[bytes], None], on_closed: Callable[[], None]) -> None:
        self.on_data = on_data
        self.on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.closed = False
        self._on_resume: list[Callable[[], None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=BACKEND_WRITE_LIMIT)

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()
        self.on_closed()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        callbacks, self._on_resume = self._on_resume, []
        for callback in callbacks:
            callback()

    def write(self, data: bytes, sender: ServerConnection) -> None:
        """Write, and stop reading the sender's websocket while the backend is behind."""
        if self.transport is None or self.closed:
            return
        self.transport.write(data)
        if self.paused:
            sender.transport.pause_reading()
            self._on_resume.append(sender.transport.resume_reading)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_unix_link(
    path: Path, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
) -> BackendLink:
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_unix_connection(
            lambda: BackendLink(on_data, on_closed), str(path)
        )
    except OSError as error:
        raise Unavailable("The console is not available: is the instance running?") from error
    return link


class OutputPump:
    """Sends backend output to websockets; when one of them cannot keep up, stops reading the
    backend until it drains, and drops it if it stays stuck."""

    def __init__(self, link_getter: Callable[[], Link | None]) -> None:
        self._link = link_getter
        self._waiting: asyncio.Task[None] | None = None

    def send(self, connections: list[ServerConnection], data: bytes) -> None:
        broadcast(connections, data)
        if self._waiting is None and any(ws.paused for ws in connections):
            link = self._link()
            if link is not None:
                link.pause_reading()
            self._waiting = asyncio.get_running_loop().create_task(self._wait(connections))

    async def _wait(self, connections: list[ServerConnection]) -> None:
        try:
            stuck = [ws for ws in connections if ws.paused]
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(ws.drain()) for ws in stuck], timeout=SLOW_VIEWER_SECONDS
            )
            for task in pending:
                task.cancel()
            for ws in stuck:
                if ws.paused:
                    ws.transport.abort()  # too slow: it reconnects and catches up from history
        finally:
            self._waiting = None
            link = self._link()
            if link is not None:
                link.resume_reading()


class ConsoleConnection(ServerConnection):
    """A websocket that hands each complete message to its session's `sink` right from
    data_received, instead of queueing it for the handler task: one event-loop hop less per
    keystroke. Fragmented messages (browsers do not send them) still go through the queue."""

    sink: Callable[[bytes | str], None] | None = None

    def process_event(self, event: Event) -> None:
        sink = self.sink
        if sink is not None and isinstance(event, Frame) and event.fin:
            if event.opcode is Opcode.BINARY:
                sink(bytes(event.data))
                return
            if event.opcode is Opcode.TEXT:
                sink(bytes(event.data).decode(errors="replace"))
                return
        super().process_event(event)


def close_reason(ws: ServerConnection) -> str:
    if ws.close_code is None:
        return "closed"
    return f"{ws.close_code} {ws.close_reason}".strip()


def clipped(reason: str) -> str:
    """A close frame's reason holds 123 bytes; a "closed" message before it holds it all."""
    encoded = reason.encode()
    return reason if len(encoded) <= 123 else encoded[:120].decode(errors="ignore") + "…"
