"""The proxy's end of a console its engine serves as a websocket (KubeVirt's `console` and
`vnc` subresources, subprotocol plain.kubevirt.io: the console's raw bytes in binary frames),
with the same flow control as a unix socket's end."""

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from instances.backends.base import RemoteConsole

from .links import BACKEND_WRITE_LIMIT, Unavailable

OPEN_SECONDS = 10
REFUSED = {
    400: "the cluster says its instance is not running",
    401: "the cluster refused the console's token (expired or revoked)",
    403: "the cluster's RBAC role of the console lacks this console's subresource",
    404: "the cluster has no running instance of it",
}


class RemoteLink:
    """One websocket to the engine: its messages go to `on_data`; writes are queued and sent in
    order by one task, and a sender that outruns the engine is paused until the queue drains."""

    def __init__(
        self, ws: ClientConnection, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
    ) -> None:
        self.ws = ws
        self.closed = False
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._paused_senders: list[ServerConnection] = []
        self._reader = asyncio.get_running_loop().create_task(self._read(on_data, on_closed))
        self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _read(self, on_data: Callable[[bytes], None], on_closed: Callable[[], None]) -> None:
        try:
            async for message in self.ws:
                on_data(message if isinstance(message, bytes) else message.encode())
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._writer.cancel()
            self._resume_senders()
            on_closed()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                data = b"".join(self._queue)
                self._queue.clear()
                try:
                    await self.ws.send(data)
                except ConnectionClosed:
                    return
                self._queued -= len(data)
                if self._queued <= BACKEND_WRITE_LIMIT // 2:
                    self._resume_senders()

    def write(self, data: bytes, sender: ServerConnection) -> None:
        if self.closed:
            return
        self._queue.append(data)
        self._queued += len(data)
        self._wake.set()
        if self._queued > BACKEND_WRITE_LIMIT and sender not in self._paused_senders:
            sender.transport.pause_reading()
            self._paused_senders.append(sender)

    def _resume_senders(self) -> None:
        senders, self._paused_senders = self._paused_senders, []
        for sender in senders:
            sender.transport.resume_reading()

    def pause_reading(self) -> None:
        if not self.closed:
            self.ws.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.closed:
            self.ws.transport.resume_reading()

    def close(self) -> None:
        if not self.closed:
            asyncio.get_running_loop().create_task(self.ws.close())


async def open_remote(
    console: RemoteConsole, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
) -> RemoteLink:
    """Open the engine's console websocket; Unavailable says why it would not open."""
    context = None
    if console.url.startswith("wss://"):
        context = ssl.create_default_context(cafile=console.ca_file or None)
    try:
        ws = await connect(
            console.url,
            subprotocols=[Subprotocol(console.subprotocol)],
            additional_headers=list(console.headers),
            ssl=context,
            compression=None,
            open_timeout=OPEN_SECONDS,
            max_size=None,
            user_agent_header="zopday-console",
        )
    except InvalidStatus as error:
        code = error.response.status_code
        why = REFUSED.get(code, f"the cluster answered {code}")
        raise Unavailable(f"The console is not available: {why}.") from error
    except (OSError, TimeoutError, InvalidHandshake) as error:
        raise Unavailable(
            f"The console is not available: the cluster's API server does not answer ({error})."
        ) from error
    with contextlib.suppress(Exception):
        ws.transport.set_write_buffer_limits(high=BACKEND_WRITE_LIMIT)
    return RemoteLink(ws, on_data, on_closed)
