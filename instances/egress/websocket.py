"""Websockets the console opens to an address a server gave it (a cloud session's stream URL):
to the address the egress policy checked, with no proxy from the environment, and no
redirect to another host."""

import asyncio
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.uri import parse_uri

from .policy import checked_addresses


async def pinned_websocket(url: str, *, checked: bool = True, **options: Any) -> ClientConnection:
    """The websocket of `url` (websockets' own connect options pass through); EgressRefused
    before a byte goes to a blocked address. `checked=False` only for the console's own fake
    cloud on loopback, which still takes no proxy and no redirect elsewhere."""
    uri = parse_uri(url)  # the reading websockets itself makes of the URL
    address = uri.host
    if checked:
        addresses = await asyncio.to_thread(checked_addresses, uri.host, uri.port)
        if not addresses:  # a lookup of its own could get another answer: not tried
            raise OSError(f"{uri.host} is unknown")
        address = addresses[0]
    try:
        # host/port set the TCP destination only: TLS and the Host header keep the URL's
        # name, and websockets then refuses redirects to another host. A proxy, the
        # environment's by default, would be the address checked and connect anywhere.
        return await connect(url, proxy=None, host=address, port=uri.port, **options)
    except ValueError as refused:  # a redirect to another host
        raise ConnectionError(str(refused)) from refused
