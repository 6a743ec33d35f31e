"""The open terminal hubs of a proxy, and serving one viewer of a hub."""

import asyncio
from pathlib import Path

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from instances.backends.base import ConsoleEndpoint

from .links import ConsoleConnection, close_reason
from .terminals import TerminalHub, Viewer


class HubRegistry:
    """The open terminal hubs, one per (backend, machine, console kind)."""

    def __init__(self, *, history_bytes: int, linger: float) -> None:
        self.history_bytes = history_bytes
        self.linger = linger
        self.hubs: dict[tuple[str, str, str], TerminalHub] = {}
        self._starting: dict[tuple[str, str, str], asyncio.Future[TerminalHub]] = {}

    async def hub(
        self, key: tuple[str, str, str], socket_path: ConsoleEndpoint, serial_log: Path | None
    ) -> TerminalHub:
        if key in self.hubs:
            return self.hubs[key]
        if key in self._starting:
            return await asyncio.shield(self._starting[key])
        future: asyncio.Future[TerminalHub] = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        hub = TerminalHub(
            key,
            socket_path,
            serial_log=serial_log,
            history_bytes=self.history_bytes,
            linger=self.linger,
            on_gone=self._forget,
        )
        try:
            await hub.start()
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: waiters re-raise it
            raise
        else:
            self.hubs[key] = hub
            future.set_result(hub)
            return hub
        finally:
            del self._starting[key]

    def _forget(self, hub: TerminalHub) -> None:
        if self.hubs.get(hub.key) is hub:
            del self.hubs[hub.key]

    def close_all(self) -> None:
        for hub in list(self.hubs.values()):
            hub.close()

    async def close_all_and_wait(self, timeout: float = 5) -> None:
        """Close every hub and let their closings finish (a cloud's session channel tells its
        service the session is over), for at most `timeout` seconds."""
        self.close_all()
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending, timeout=timeout)


async def run_terminal(ws: ServerConnection, hub: TerminalHub, viewer: Viewer) -> str:
    """Serve one terminal viewer until it or the backend goes away; returns why it ended."""
    hub.join(viewer)
    if isinstance(ws, ConsoleConnection):
        ws.sink = lambda message: hub.receive(viewer, message)
    try:
        async for message in ws:  # only what the sink did not take
            hub.receive(viewer, message)
    except ConnectionClosed:
        pass
    finally:
        if isinstance(ws, ConsoleConnection):
            ws.sink = None
        hub.leave(viewer)
    return close_reason(ws)
