"""A CONNECT proxy on loopback for clients that run as programs (skopeo): each tunnel goes to
an address the egress policy checked when it resolved the name, so neither a redirect (a
registry's blob storage) nor a second DNS answer reaches a blocked address."""

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .netns_relay import pump
from .policy import EgressRefused, checked_addresses, refuse_peer

HEAD_MAX = 16 * 1024
CONNECT_SECONDS = 10


class _Tunnels(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    refused: list[str]
    unreachable: list[str]


class _UnixTunnels(socketserver.ThreadingUnixStreamServer):
    """The same proxy on a unix socket: a program in a network namespace of its own reaches it."""

    daemon_threads = True
    refused: list[str]
    unreachable: list[str]


class _Tunnel(socketserver.BaseRequestHandler):
    server: _Tunnels | _UnixTunnels

    def handle(self) -> None:
        client: socket.socket = self.request
        client.settimeout(CONNECT_SECONDS)
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < HEAD_MAX:
                got = client.recv(4096)
                if not got:
                    return
                head += got
        method, _, rest = head.decode("latin-1").partition(" ")
        host, _, port = rest.partition(" ")[0].rpartition(":")
        host = host.strip("[]")
        if method != "CONNECT" or not port.isdigit():
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            upstream = self._connected(host, int(port))
        except EgressRefused as refused:
            self.server.refused.append(refused.message)
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        except OSError:
            self.server.unreachable.append(host)
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            client.settimeout(None)
            _relay(client, upstream)

    @staticmethod
    def _connected(host: str, port: int) -> socket.socket:
        addresses = checked_addresses(host, port)
        if not addresses:
            raise OSError(f"{host} is unknown")
        upstream = socket.create_connection((addresses[0], port), timeout=CONNECT_SECONDS)
        refuse_peer(upstream, host)
        upstream.settimeout(None)
        return upstream


def _relay(one: socket.socket, other: socket.socket) -> None:
    """Copy both ways until either side closes."""
    back = threading.Thread(target=pump, args=(other, one), daemon=True)
    back.start()
    pump(one, other)
    back.join()


@dataclass
class Proxy:
    url: str  # for HTTPS_PROXY
    refused: list[str]  # the refusals it made
    unreachable: list[str]  # hosts it could not connect to
    socket: Path | None = None  # where it also listens, when asked


@contextmanager
def egress_proxy(unix: Path | None = None) -> Iterator[Proxy]:
    """The proxy, listening while the block runs (also at the unix socket `unix`, if given)."""
    refused: list[str] = []
    unreachable: list[str] = []
    tcp = _Tunnels(("127.0.0.1", 0), _Tunnel)
    servers: list[_Tunnels | _UnixTunnels] = [tcp]
    if unix is not None:
        servers.append(_UnixTunnels(str(unix), _Tunnel))
    threads = []
    for server in servers:
        server.refused, server.unreachable = refused, unreachable
        threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        threads[-1].start()
    try:
        yield Proxy(f"http://127.0.0.1:{tcp.server_address[1]}", refused, unreachable, unix)
    finally:
        for server, thread in zip(servers, threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join()
