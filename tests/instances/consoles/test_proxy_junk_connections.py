"""The console proxy under a flood of junk connections (TCP opened, then nothing or garbage):
it takes every connection in while busy, drops the junk, and still admits a real console."""

import contextlib
import select
import socket
import threading

import pytest

from tests.instances.consoles.conftest import issue_ticket, open_console, wait_until
from tests.instances.consoles.test_proxy import control, output_until

pytestmark = pytest.mark.django_db(transaction=True)

JUNK = 300  # three times asyncio's default listen backlog
BOUND = 30  # generous: on a proxy whose backlog is full, the connection never completes


def connecting(port: int) -> socket.socket:
    """A TCP connection under way, as a flood opens them: no waiting for each to complete."""
    sock = socket.socket()
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        sock.recv(4096)  # an answer (a 400) or the end: the proxy is done with it
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def test_a_busy_proxy_takes_a_real_console_in_among_hundreds_of_junk_connections(
    console_proxy, fake_backend, running_instance, operator, loop_thread
):
    port = int(console_proxy.url.rsplit(":", 1)[1])
    ticket = issue_ticket(operator, running_instance)
    # Hold the proxy's loop, as a burst of work does, while the flood and the browser arrive.
    held, release = threading.Event(), threading.Event()
    loop_thread.loop.call_soon_threadsafe(lambda: (held.set(), release.wait(BOUND * 2)))
    assert held.wait(10)
    junk = [connecting(port) for _ in range(JUNK)]
    browser = connecting(port)
    try:
        for index, sock in enumerate(junk):
            if index % 2:  # the other half sends nothing at all
                with contextlib.suppress(OSError):  # not connected yet
                    sock.send(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
        # The kernel completes the browser's connection although the proxy has not accepted
        # anything yet: it waits in the listen queue instead of being dropped.
        _, completed, _ = select.select([], [browser], [], BOUND)
        assert completed == [browser], "the browser's connection was not taken in"
        release.set()
        browser.setblocking(True)
        with open_console(
            console_proxy, running_instance, ticket=ticket, cookie_user=operator, sock=browser
        ) as ws:
            assert control(ws, "hello", timeout=BOUND)["mine"]
            ws.send(b"still here\r")
            assert b"still here" in output_until(ws, b"still here\r", timeout=BOUND)
        # and the junk is let go of: garbage answered at once, silence at the handshake deadline
        wait_until(lambda: all(closed_by_peer(sock) for sock in junk), "junk dropped", BOUND)
    finally:
        release.set()
        for sock in junk:
            sock.close()
