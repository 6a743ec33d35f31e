"""VNC sessions: QEMU's VNC server takes many clients, so each session has its own backend
connection, with the client's bytes passed through rfb.ClientFilter (read-only sends no input)."""

import asyncio
import logging

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from instances.backends.base import ConsoleEndpoint
from instances.consoles.rfb import ClientFilter, RfbError
from instances.consoles.sessions import Admission, Tally

from .endpoints import open_link
from .links import (
    CLOSE_BACKEND_GONE,
    ConsoleConnection,
    Link,
    OutputPump,
    close_reason,
)

log = logging.getLogger("zopday.consoleproxy")


async def run_vnc(
    ws: ServerConnection,
    admission: Admission,
    socket_path: ConsoleEndpoint,
    tally: Tally | None = None,
) -> tuple[str, int, int]:
    """Serve one VNC session on its own backend connection; returns (reason, bytes to the
    guest, bytes to the browser), which `tally` reads as they grow."""
    counts = [0, 0]
    if tally is not None:
        tally.read = lambda: (counts[0], counts[1])
    link: Link | None = None
    client = ClientFilter(read_only=admission.read_only)

    def output(data: bytes) -> None:
        counts[1] += len(data)
        pump.send([ws], data)

    def closed() -> None:
        asyncio.get_running_loop().create_task(ws.close(CLOSE_BACKEND_GONE, "The console closed."))

    def receive(message: bytes | str) -> None:
        if isinstance(message, str) or link is None or link.closed:
            return  # text frames are the page's keepalive pings
        try:
            data = client.feed(message)
        except RfbError as error:
            log.warning("VNC session %s: %s", admission.session_id, error)
            link.close()
            asyncio.get_running_loop().create_task(ws.close(1008, "Unexpected VNC message."))
            return
        if data:
            counts[0] += len(data)
            link.write(data, ws)

    pump = OutputPump(lambda: link)
    link = await open_link(socket_path, output, closed)
    if isinstance(ws, ConsoleConnection):
        ws.sink = receive
    try:
        async for message in ws:
            receive(message)
    except ConnectionClosed:
        pass
    finally:
        if isinstance(ws, ConsoleConnection):
            ws.sink = None
        link.close()
    return close_reason(ws), counts[0], counts[1]
