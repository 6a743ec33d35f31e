"""Opening a console's backend connection, whichever end serves it: a unix socket of this
console's hosts (links.py), an engine's websocket (remote.py), or a channel the backend dials
itself (a cloud's exec channel)."""

from collections.abc import Callable
from typing import cast

from instances.backends.base import ConsoleEndpoint, DialedConsole, RemoteConsole

from .links import Link, open_unix_link
from .remote import open_remote


async def open_link(
    endpoint: ConsoleEndpoint, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
) -> Link:
    if isinstance(endpoint, RemoteConsole):
        return await open_remote(endpoint, on_data, on_closed)
    if isinstance(endpoint, DialedConsole):
        return cast(Link, await endpoint.open_link(on_data, on_closed))
    return await open_unix_link(endpoint, on_data, on_closed)
