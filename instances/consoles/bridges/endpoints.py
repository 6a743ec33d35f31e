"""Opening a console's backend connection, whichever end serves it: a unix socket of this
console's hosts (links.py) or an engine's websocket (remote.py)."""

from collections.abc import Callable

from instances.backends.base import ConsoleEndpoint, RemoteConsole

from .links import Link, open_unix_link
from .remote import open_remote


async def open_link(
    endpoint: ConsoleEndpoint, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
) -> Link:
    if isinstance(endpoint, RemoteConsole):
        return await open_remote(endpoint, on_data, on_closed)
    return await open_unix_link(endpoint, on_data, on_closed)
