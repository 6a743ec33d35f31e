"""HTTP clients bound by the egress policy at connect time: each connection goes to an address
checked when it was resolved (no second DNS answer), and its peer is checked again before a
byte is sent. For requests sessions and for SDKs built on urllib3 pools (botocore)."""

import socket
from collections.abc import MutableMapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .policy import checked_addresses, refuse_peer

Pools = MutableMapping[str, type[HTTPConnectionPool]]


class _Pinned:
    host: str
    port: int
    _dns_host: str

    def _new_conn(self) -> socket.socket:
        addresses = checked_addresses(self._dns_host, self.port)
        if addresses:  # unresolvable: urllib3's own attempt names the unknown host
            self._dns_host = addresses[0]
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        refuse_peer(sock, self.host)
        return sock


def pin_pools(pools: Pools) -> None:
    """Replace each pool class of a urllib3 pool manager's table by one whose connections
    are pinned (in place: managers made from the same table follow)."""
    for scheme, pool in list(pools.items()):
        if issubclass(pool.ConnectionCls, _Pinned):
            continue
        connection = type(f"Pinned{pool.ConnectionCls.__name__}", (_Pinned, pool.ConnectionCls), {})
        pools[scheme] = type(f"Pinned{pool.__name__}", (pool,), {"ConnectionCls": connection})


class _PinnedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        pools: Pools = {"http": HTTPConnectionPool, "https": HTTPSConnectionPool}
        pin_pools(pools)
        self.poolmanager.pool_classes_by_scheme = pools  # type: ignore[assignment]


def pin_session(session: requests.Session) -> requests.Session:
    """The session, its http and https connections pinned; EgressRefused before a byte goes
    to a blocked address. It takes no proxy or netrc from the worker's environment: a proxy
    would be the address checked, and it would connect anywhere."""
    session.trust_env = False
    adapter = _PinnedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def pinned_session() -> requests.Session:
    """A new pinned session."""
    return pin_session(requests.Session())
