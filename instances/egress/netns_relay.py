"""Run inside a network namespace of its own (`unshare --net`): bring up loopback, relay its ports
to the egress proxy's unix socket, run a program and exit with its status. A client that goes
straight to loopback (Go does for 127.x, ::1, localhost) finds the policy-checking proxy or nothing.

    netns_relay.py SOCKET PROXY_PORT [LISTEN_PORT=HOST:PORT ...] -- PROGRAM ARGS...

PROXY_PORT is relayed to the proxy as is; each LISTEN_PORT is a tunnel the proxy opens (and
checks) to HOST:PORT, for a registry on the host's loopback that the policy allows."""

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1
HEAD_MAX = 16 * 1024


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy source to target until either side closes, then end both."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    for end in (source, target):  # one side done: the other pump ends too
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def _tunnel(proxy: socket.socket, target: str) -> bool:
    """Ask the proxy for a tunnel to `target`; whether it opened one."""
    proxy.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head and len(head) < HEAD_MAX:
        got = proxy.recv(1)  # byte by byte: nothing of the tunnel is read past the head
        if not got:
            return False
        head += got
    return head.split(b" ", 2)[1:2] == [b"200"]


def _serve(client: socket.socket, path: str, target: str) -> None:
    with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as proxy:
        try:
            proxy.connect(path)
            if target and not _tunnel(proxy, target):
                return
        except OSError:
            return
        back = threading.Thread(target=pump, args=(proxy, client), daemon=True)
        back.start()
        pump(client, proxy)
        back.join()


def _listen(port: int, path: str, target: str) -> None:
    """Relay 127.0.0.1:port (and [::1]:port when the namespace has IPv6) to the proxy."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            server = socket.socket(family, socket.SOCK_STREAM)
            server.bind((host, port))
        except OSError:
            if family == socket.AF_INET:
                raise
            continue
        server.listen(64)
        threading.Thread(target=_accept, args=(server, path, target), daemon=True).start()


def _accept(server: socket.socket, path: str, target: str) -> None:
    while True:
        client, _ = server.accept()
        threading.Thread(target=_serve, args=(client, path, target), daemon=True).start()


def _dies_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str]) -> int:
    ours, program = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    path, proxy_port, tunnels = ours[0], int(ours[1]), ours[2:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    _listen(proxy_port, path, "")
    for tunnel in tunnels:
        port, _, target = tunnel.partition("=")
        _listen(int(port), path, target)
    # the program dies with the relay (a timeout kills the relay, which unshare became)
    return subprocess.run(program, preexec_fn=_dies_with_parent, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
