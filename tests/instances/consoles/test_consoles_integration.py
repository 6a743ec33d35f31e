"""The consoles of a real demo guest, through `manage.py consoleproxy` and a Celery worker."""

import struct
import time

import pytest

from instances.backends import backend_named
from instances.choices import PowerState
from instances.models import ConsoleSession
from instances.services import power
from tests.factories import SubnetFactory, demo_image, demo_instance
from tests.instances.consoles.conftest import (
    ORIGIN,
    discard_machine,
    free_port,
    issue_ticket,
    open_console,
    wait_until,
)
from tests.instances.consoles.test_rfb import KEY_CTRL_ALT_DEL
from tests.services import start_console_proxy, stop

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class ProxyProcess:
    def __init__(self, port: int) -> None:
        self.url = f"ws://127.0.0.1:{port}"


@pytest.fixture
def proxy_process(celery_worker_process, tmp_path):
    port = free_port()
    process = start_console_proxy(port, [ORIGIN], tmp_path / "consoleproxy.log")
    yield ProxyProcess(port)
    stop(process)


@pytest.fixture
def demo_vm(project, owner, operator, celery_worker_process):
    lan = SubnetFactory(project=project, name="lan", cidr_v4="10.89.0.0/24", gateway="10.89.0.1")
    vm = demo_instance(
        actor=owner, image=demo_image(), subnet=lan, name="console-vm", ip="10.89.0.10"
    )
    power.instance_start(instance=vm, actor=operator)
    backend = backend_named("qemu")
    log = backend.serial_log(vm.machine_id)
    wait_until(
        lambda: log.exists() and b"root@console-vm:/# " in log.read_bytes(), "the prompt", 120
    )
    vm.refresh_from_db()
    assert vm.power_state == PowerState.RUNNING
    yield vm
    discard_machine(vm)


def read_until(ws, expected: bytes, timeout: float = 30) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while expected not in seen:
        message = ws.recv(timeout=max(0.05, deadline - time.monotonic()))
        if isinstance(message, bytes):
            seen += message
    return seen


def read_exactly(ws, buffer: bytearray, size: int, timeout: float = 30) -> bytes:
    deadline = time.monotonic() + timeout
    while len(buffer) < size:
        message = ws.recv(timeout=max(0.05, deadline - time.monotonic()))
        if isinstance(message, bytes):
            buffer += message
    data = bytes(buffer[:size])
    del buffer[:size]
    return data


def test_serial_exec_and_vnc_consoles_of_a_real_guest(proxy_process, demo_vm, operator):
    # serial: a late viewer sees the boot, then types into the shell
    ticket = issue_ticket(operator, demo_vm, "serial")
    with open_console(proxy_process, demo_vm, "serial", ticket=ticket, cookie_user=operator) as ws:
        assert b"zopday-demo: ready" in read_until(ws, b"zopday-demo: ready")
        ws.send(b"echo zop-$((6*7))\r")
        assert b"zop-42" in read_until(ws, b"zop-42")

    # exec: a shell on the virtio-serial channel, no network needed
    ticket = issue_ticket(operator, demo_vm, "exec")
    with open_console(proxy_process, demo_vm, "exec", ticket=ticket, cookie_user=operator) as ws:
        ws.send(b"echo exec-$((6*7)) $(hostname)\n")
        assert b"exec-42 console-vm" in read_until(ws, b"exec-42 console-vm")

    # VNC: the RFB handshake, a frame of the screen, then Ctrl+Alt+Del reboots the guest
    backend = backend_named("qemu")
    boots = backend.status(demo_vm.machine_id).boots
    ticket = issue_ticket(operator, demo_vm, "vnc")
    with open_console(proxy_process, demo_vm, "vnc", ticket=ticket, cookie_user=operator) as ws:
        buffer = bytearray()
        assert read_exactly(ws, buffer, 12).startswith(b"RFB 003.00")
        ws.send(b"RFB 003.008\n")
        count = read_exactly(ws, buffer, 1)[0]
        assert 1 in read_exactly(ws, buffer, count)  # security None offered
        ws.send(b"\x01")
        assert read_exactly(ws, buffer, 4) == b"\x00\x00\x00\x00"  # security result OK
        ws.send(b"\x01")  # ClientInit, shared
        width, height = struct.unpack(">HH", read_exactly(ws, buffer, 4))
        assert width > 0 and height > 0
        read_exactly(ws, buffer, 16)  # pixel format
        read_exactly(ws, buffer, struct.unpack(">I", read_exactly(ws, buffer, 4))[0])  # name
        ws.send(struct.pack(">BxHi", 2, 1, 0))  # SetEncodings: raw
        ws.send(struct.pack(">BBHHHH", 3, 0, 0, 0, width, height))
        message_type, _, rectangles = struct.unpack(">BBH", read_exactly(ws, buffer, 4))
        assert message_type == 0 and rectangles >= 1  # FramebufferUpdate
        ws.send(KEY_CTRL_ALT_DEL)
        wait_until(
            lambda: backend.status(demo_vm.machine_id).boots > boots, "the guest to reboot", 60
        )

    wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).count() == 3,
        "the audit records",
    )
    sessions = list(ConsoleSession.objects.order_by("pk"))
    assert [s.kind for s in sessions] == ["serial", "exec", "vnc"]
    assert all(s.bytes_to_guest > 0 and s.bytes_from_guest > 0 for s in sessions)
    assert all(s.recording for s in sessions[:2]) and not sessions[2].recording
