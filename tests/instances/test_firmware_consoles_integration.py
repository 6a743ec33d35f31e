"""Firmware and consoles of instances driven through the services, a real Celery worker and
`manage.py consoleproxy`, on each platform: this console's QEMU hosts and a KubeVirt cluster
(the fake, whose VMIs are real QEMU guests). The consoles are opened as the page opens them."""

import json
import re
import time

import pytest
from django.conf import settings
from django.test import Client
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

from instances.choices import PowerState
from instances.models import ConsoleSession
from instances.services import power
from tests import factories
from tests.instances.consoles.conftest import ORIGIN, free_port, wait_until
from tests.instances.consoles.test_consoles_integration import read_exactly, read_until
from tests.instances.test_machines_integration import run_in, wait_for_prompt, wait_for_state
from tests.services import start_console_proxy, stop

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lan(platform, project):
    return platform.lan(project, "10.87.0")


@pytest.fixture
def proxy_url(platform, settings, tmp_path):
    """`manage.py consoleproxy` on a free port, where the console pages send the browser."""
    port = free_port()
    process = start_console_proxy(port, [ORIGIN], tmp_path / "consoleproxy.log")
    settings.CONSOLEPROXY_URL = f"ws://127.0.0.1:{port}"
    yield settings.CONSOLEPROXY_URL
    stop(process)


def test_uefi_secure_boot_persistent_efi_and_a_vtpm_are_seen_by_the_guest_kernel(
    platform, project, operator, lan
):
    vm = platform.make(
        operator, factories.demo_image(), lan, "uefi-vm", "10.87.0.10",
        bootloader="uefi", secure_boot=True, persistent_efi=True, vtpm=True,
    )  # fmt: skip
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING, timeout=180)
    wait_for_prompt(platform, vm)
    kernel_log = run_in(platform, vm, "dmesg")
    assert "efi: EFI v2" in kernel_log
    assert "secureboot: Secure boot enabled" in kernel_log
    assert "tpm_crb MSFT0101:00" in kernel_log
    assert run_in(platform, vm, "ls /dev/tpm0") == "/dev/tpm0"
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=30)


class Browser:
    """A logged-in browser on a console page: it fetches a ticket as console_ticket.js does
    (POST with the page's CSRF token) and opens the websocket the ticket names."""

    def __init__(self, user, vm) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.client.force_login(user)
        self.base = f"/projects/{vm.project.slug}/instances/{vm.pk}/console/"

    def open(self, kind: str) -> ClientConnection:
        page = self.client.get(f"{self.base}{kind}/").content.decode()
        ticket_url = re.search(r'data-ticket-url="([^"]+)"', page)
        csrf = re.search(r'data-csrf="([^"]+)"', page)
        assert ticket_url and csrf, page
        answer = self.client.post(ticket_url[1], HTTP_X_CSRFTOKEN=csrf[1])
        assert answer.status_code == 200, answer.content
        ticket = answer.json()
        cookie = self.client.cookies[settings.SESSION_COOKIE_NAME].value
        return connect(
            ticket["url"],
            origin=Origin(ORIGIN),
            subprotocols=[
                Subprotocol("binary" if kind == "vnc" else "zopday.console"),
                Subprotocol(ticket["subprotocol"]),
            ],
            additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
            compression=None,
            open_timeout=10,
        )


def control(ws: ClientConnection, kind: str, timeout: float = 30) -> dict:
    """The proxy's next control message of this type (output in between is skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.05, deadline - time.monotonic()))
        if isinstance(message, str) and json.loads(message)["type"] == kind:
            return json.loads(message)


def test_a_default_instance_boots_bios_and_its_serial_and_vnc_consoles_go_through_the_proxy(
    platform, project, operator, owner, lan, proxy_url
):
    vm = platform.make(operator, factories.demo_image(), lan, "console-vm", "10.87.0.11")
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    assert (
        run_in(platform, vm, "ls -d /sys/firmware/efi /dev/tpm0 2>&1; true").count("No such file")
        == 2
    )  # BIOS, and no TPM, unless asked for

    with Browser(operator, vm).open("serial") as first:
        assert control(first, "hello")["mine"]
        first.send(b"echo zop-$((6*7))\r")
        assert b"zop-42" in read_until(first, b"zop-42")
        with Browser(owner, vm).open("serial") as second:
            hello = control(second, "hello")
            assert not hello["mine"] and hello["viewers"] == 2
            first.send(b"echo seen-by-$((2*3))\r")
            assert b"seen-by-6" in read_until(second, b"seen-by-6")  # one output, two viewers
            second.send(json.dumps({"type": "take"}))  # the second takes the keyboard
            assert control(second, "keyboard")["mine"]
            assert control(first, "keyboard")["holder"] == "owner"
            second.send(b"echo taken-$((4*5))\r")
            assert b"taken-20" in read_until(first, b"taken-20")

    with Browser(operator, vm).open("vnc") as ws:
        buffer = bytearray()
        assert read_exactly(ws, buffer, 12) == b"RFB 003.008\n"

    wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).count() == 3,
        "the three sessions to end",
        30,
    )
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=30)
