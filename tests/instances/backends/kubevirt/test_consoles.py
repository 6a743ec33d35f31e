"""The serial and VNC consoles of an instance on a cluster: `manage.py consoleproxy` bridges the
browser's websocket to the VMI's `console` and `vnc` subresources on the fake, whose guest is
a real QEMU machine; KubeVirt has no exec channel, and the console says so."""

import struct

import pytest

from instances.actions import instance_console_actions
from instances.choices import PowerState, Role
from instances.models import ConsoleSession
from instances.services import power
from tests.fakes.kubevirt.fixtures import create, wait_for_prompt, wait_for_state
from tests.instances.consoles.conftest import (
    ORIGIN,
    free_port,
    issue_ticket,
    open_console,
    wait_until,
)
from tests.instances.consoles.test_consoles_integration import read_exactly, read_until
from tests.services import start_console_proxy, stop

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class ProxyProcess:
    def __init__(self, port: int) -> None:
        self.url = f"ws://127.0.0.1:{port}"


@pytest.fixture
def proxy_process(tmp_path):
    port = free_port()
    process = start_console_proxy(port, [ORIGIN], tmp_path / "consoleproxy.log")
    yield ProxyProcess(port)
    stop(process)


@pytest.fixture
def running(celery_worker_process, kubevirt, cluster, watching, cluster_lan, operator):
    instance = create(operator, cluster_lan)
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    return instance


def test_serial_and_vnc_consoles_of_a_kubevirt_instance_go_through_its_subresources(
    proxy_process, running, kube_api, operator, viewer
):
    ticket = issue_ticket(operator, running, "serial")
    with open_console(proxy_process, running, "serial", ticket=ticket, cookie_user=operator) as ws:
        ws.send(b"echo zop-$((6*7))\r")
        assert b"zop-42" in read_until(ws, b"zop-42")
        # a viewer joins the same console, sees what follows and cannot type
        ticket = issue_ticket(viewer, running, "serial")
        with open_console(
            proxy_process, running, "serial", ticket=ticket, cookie_user=viewer
        ) as watcher:
            ws.send(b"echo seen-by-$((2*3))\r")
            assert b"seen-by-6" in read_until(watcher, b"seen-by-6")
            watcher.send(b"echo typed-by-viewer\r")
            ws.send(b"echo after-$((3*3))\r")
            assert b"typed-by-viewer" not in read_until(ws, b"after-9")

    ticket = issue_ticket(operator, running, "vnc")
    with open_console(proxy_process, running, "vnc", ticket=ticket, cookie_user=operator) as ws:
        buffer = bytearray()
        assert read_exactly(ws, buffer, 12).startswith(b"RFB 003.00")
        ws.send(b"RFB 003.008\n")
        count = read_exactly(ws, buffer, 1)[0]
        assert 1 in read_exactly(ws, buffer, count)  # security None, as virt-handler offers
        ws.send(b"\x01")
        assert read_exactly(ws, buffer, 4) == b"\x00\x00\x00\x00"
        ws.send(b"\x01")
        width, height = struct.unpack(">HH", read_exactly(ws, buffer, 4))
        assert width > 0 and height > 0

    wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).count() == 3,
        "the three sessions to end",
        30,
    )
    recorded = ConsoleSession.objects.filter(kind="serial", user=operator).get()
    assert recorded.bytes_to_guest > 0 and recorded.bytes_from_guest > 0


def test_kubevirt_gives_no_exec_console_and_no_serial_log(running, operator):
    allowed = instance_console_actions(running, Role.OPERATOR)
    assert allowed["console"] and allowed["vnc_console"]
    assert not allowed["exec_console"]
    assert allowed["exec_console"].reason == (
        "kubevirt gives its machines no exec console: use serial or vnc."
    )
    assert not allowed["serial_log"]
    assert allowed["serial_log"].reason == "kubevirt keeps no serial log; open the serial console."
