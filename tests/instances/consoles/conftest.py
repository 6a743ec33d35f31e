"""A real console proxy, started in-process on a free port, and a fake backend socket for the
tests that are about the proxy itself: a unix-socket server that records every byte it gets,
so a test can prove that nothing reached it."""

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import Client
from websockets.sync.client import connect

from instances.access import project_role
from instances.choices import PowerState
from instances.consoles.proxy import ConsoleProxy
from instances.consoles.registry import CONSOLE_KINDS
from instances.consoles.tickets import SUBPROTOCOL_PREFIX, console_ticket_issue
from instances.models import Instance
from instances.services.instances import instance_create
from tests.factories import instance_request

ORIGIN = "http://localhost:8000"


class LoopThread:
    """An asyncio loop in a daemon thread, for servers the (synchronous) tests talk to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class FakeBackend:
    """Unix sockets standing in for a machine's serial/vnc/exec sockets.

    Every byte received is recorded per socket kind; with echo=True it is sent back, as a
    terminal's echo would be. `emit(kind, data)` sends output to the connected clients.
    """

    def __init__(self, folder: Path, loop: LoopThread, *, echo: bool = True) -> None:
        self.folder = folder
        self.loop = loop
        self.echo = echo
        self.received: dict[str, bytearray] = {}
        self.connections: dict[str, int] = {}
        self.transports: dict[str, list[asyncio.Transport]] = {}
        self.servers: list[asyncio.AbstractServer] = []
        self.serial_log = folder / "serial.log"

    def socket_path(self, kind: str) -> Path:
        return self.folder / f"{kind}.sock"

    async def _start(self) -> None:
        for kind in ("serial", "vnc", "exec"):
            self.received[kind] = bytearray()
            self.connections[kind] = 0
            self.transports[kind] = []
            self.servers.append(
                await asyncio.get_running_loop().create_unix_server(
                    lambda kind=kind: _Recorder(self, kind), str(self.socket_path(kind))
                )
            )

    def start(self) -> "FakeBackend":
        self.loop.run(self._start())
        return self

    def emit(self, kind: str, data: bytes) -> None:
        wait_until(lambda: self.transports[kind], "the proxy's connection to the backend")

        def send():
            for transport in self.transports[kind]:
                transport.write(data)

        self.loop.loop.call_soon_threadsafe(send)

    def stop(self) -> None:
        async def close():
            for server in self.servers:
                server.close()
            for transports in self.transports.values():
                for transport in transports:
                    transport.close()

        self.loop.run(close())


class _Recorder(asyncio.Protocol):
    def __init__(self, backend: FakeBackend, kind: str) -> None:
        self.backend, self.kind = backend, kind

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.backend.connections[self.kind] += 1
        self.backend.transports[self.kind].append(transport)

    def data_received(self, data: bytes) -> None:
        self.backend.received[self.kind] += data
        if self.backend.echo and self.kind != "vnc":
            self.transport.write(data)

    def connection_lost(self, exc) -> None:
        self.backend.transports[self.kind].remove(self.transport)


class _Locator:
    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend

    def socket(self, backend: str, machine_id: str, socket_kind: str) -> Path:
        return self.backend.socket_path(socket_kind)

    def serial_log(self, backend: str, machine_id: str) -> Path | None:
        return self.backend.serial_log


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def loop_thread():
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture
def fake_backend(tmp_path, loop_thread):
    backend = FakeBackend(tmp_path, loop_thread).start()
    yield backend
    backend.stop()


@pytest.fixture
def console_proxy(fake_backend, loop_thread, settings, tmp_path):
    """The proxy on a free loopback port, bridging to the fake backend; yields its ws:// URL."""
    settings.RUN_DIR = tmp_path / "run"
    proxy = ConsoleProxy(
        allowed_origins=[ORIGIN], locator=_Locator(fake_backend), history_bytes=4096, linger=0
    )
    with served(proxy, loop_thread) as port:
        proxy.url = f"ws://127.0.0.1:{port}"
        yield proxy


@contextmanager
def served(proxy: ConsoleProxy, loop, port: int = 0) -> Iterator[int]:
    """The proxy serving on loopback (`port`, or a free one) from `loop`; yields the port,
    then closes the server and every hub."""
    port = port or free_port()

    async def start():
        return await proxy.serve("127.0.0.1", port)

    server = loop.run(start())
    try:
        yield port
    finally:

        async def stop():
            server.close()
            await server.wait_closed()
            await proxy.hubs.close_all_and_wait()
            await sync_to_async(connections.close_all)()

        loop.run(stop())


@pytest.fixture
def running_instance(project, owner, subnet):
    instance = instance_create(project=project, actor=owner, request=instance_request(subnet))
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    instance.refresh_from_db()
    return instance


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def issue_ticket(user, instance: Instance, kind: str = "serial") -> str:
    _, plaintext = console_ticket_issue(
        user=user,
        instance=instance,
        role=project_role(user, instance.project),
        kind=CONSOLE_KINDS[kind],
    )
    return plaintext


def open_console(
    proxy,
    instance: Instance,
    kind: str = "serial",
    *,
    ticket: str | None,
    cookie_user=None,
    origin: str = ORIGIN,
    subprotocols: list[str] | None = None,
    sock: socket.socket | None = None,
):
    """A websocket to the proxy as a browser would open it (sync client), over `sock` if
    given (a TCP connection already made)."""
    headers = {}
    if cookie_user is not None:
        headers["Cookie"] = f"{settings.SESSION_COOKIE_NAME}={session_cookie(cookie_user)}"
    offered = subprotocols
    if offered is None:
        offered = ["binary" if kind == "vnc" else "zopday.console"]
        if ticket is not None:
            offered.append(SUBPROTOCOL_PREFIX + ticket)
    return connect(
        f"{proxy.url}/consoles/{instance.pk}/{kind}",
        origin=origin,
        subprotocols=offered or None,
        additional_headers=headers,
        compression=None,
        open_timeout=10,
        sock=sock,
    )


def discard_machine(instance: Instance) -> None:
    """Stop a test's guest and remove its run folder and disks: machine ids and disk names
    come back in the next test (the database is flushed), and must not find this one."""
    from instances.backends import backend_named

    backend = backend_named("qemu")
    backend.force_stop(instance.machine_id)
    backend.undefine(instance.machine_id)
    for disk in instance.disks.all():
        backend.delete_disk(disk.device_name)


def wait_until(predicate, what: str, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return result
