"""Console session records: a proxy that starts closes what its killed predecessor left open."""

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.utils import timezone

from instances.consoles.proxies import this_proxy
from instances.consoles.sessions import ORPHANED, console_sessions_close_orphaned
from instances.models import ConsoleSession, Instance
from instances.services.instances import instance_create
from tests.factories import instance_request
from tests.instances.consoles.conftest import (
    ORIGIN,
    FakeBackend,
    free_port,
    issue_ticket,
    open_console,
    wait_until,
)
from tests.services import ROOT, start_console_proxy, stop

pytestmark = pytest.mark.django_db


def open_session(instance: Instance, **fields) -> ConsoleSession:
    return ConsoleSession.objects.create(
        project=instance.project, instance=instance, instance_name=instance.name,
        username="operator", kind="serial", **fields,
    )  # fmt: skip


def test_a_starting_proxy_closes_the_sessions_of_its_host_left_open(
    running_instance, owner, subnet
):
    Instance.objects.filter(pk=running_instance.pk).update(host="hv-1")
    left_open = open_session(running_instance)
    ended = open_session(running_instance, ended_at=timezone.now(), close_reason="closed")
    request = instance_request(subnet, name="web-2")
    elsewhere = instance_create(project=running_instance.project, actor=owner, request=request)
    Instance.objects.filter(pk=elsewhere.pk).update(host="hv-2")
    other_host = open_session(elsewhere)

    assert console_sessions_close_orphaned(host="hv-1") == 1

    left_open.refresh_from_db()
    assert left_open.ended_at is not None and left_open.close_reason == ORPHANED
    ended.refresh_from_db()
    assert ended.close_reason == "closed"
    other_host.refresh_from_db()
    assert other_host.ended_at is None


def test_sessions_of_deleted_instances_are_closed_too(running_instance):
    session = open_session(running_instance)
    Instance.objects.filter(pk=running_instance.pk).delete()
    assert console_sessions_close_orphaned(host="anywhere") == 1
    session.refresh_from_db()
    assert session.close_reason == ORPHANED


def test_a_starting_proxy_leaves_the_sessions_of_a_proxy_running_beside_it(running_instance):
    ended_proxy = subprocess.run(
        [sys.executable, "-c", "from instances.consoles.proxies import this_proxy; print(this_proxy())"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout.strip()  # fmt: skip
    assert ended_proxy.startswith(f"{socket.gethostname()}/")
    served = open_session(running_instance, proxy=this_proxy())  # this process runs
    orphaned = open_session(running_instance, proxy=ended_proxy)  # that one ended
    remote = open_session(running_instance, proxy="another-machine/4242/1")
    reused_pid = open_session(running_instance, proxy=this_proxy().rsplit("/", 1)[0] + "/1")

    host = running_instance.host
    assert console_sessions_close_orphaned(host=host) == 2

    for session, closed in ((served, False), (orphaned, True), (remote, False), (reused_pid, True)):
        session.refresh_from_db()
        assert (session.ended_at is not None) is closed, session.proxy


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_session_cut_by_a_proxy_kill_keeps_the_bytes_that_flowed(
    running_instance, owner, machines_root, loop_thread, tmp_path, monkeypatch, django_db_setup
):
    """The proxy is killed (SIGKILL) mid-session, after output flowed; the next proxy closes the
    record as orphaned, and it says how many bytes went each way."""
    Instance.objects.filter(pk=running_instance.pk).update(host=settings.ZOPDAY_HOST)
    folder = machines_root / running_instance.machine_id
    folder.mkdir()
    machine = FakeBackend(folder, loop_thread).start()  # the machine's serial socket: an echo
    monkeypatch.setenv("CONSOLE_COUNT_SECONDS", "1")
    port = free_port()
    first = start_console_proxy(port, [ORIGIN], tmp_path / "first.log")
    second = None
    try:
        ticket = issue_ticket(owner, running_instance)
        proxy = SimpleNamespace(url=f"ws://127.0.0.1:{port}")
        with open_console(proxy, running_instance, ticket=ticket, cookie_user=owner) as ws:
            ws.send(b"echo hi\r")
            seen = b""
            while b"echo hi\r" not in seen:
                message = ws.recv(timeout=10)
                seen += message if isinstance(message, bytes) else b""
            session = ConsoleSession.objects.get(instance=running_instance)
            wait_until(
                lambda: ConsoleSession.objects.get(pk=session.pk).bytes_from_guest >= 8,
                "the counts on the record",
            )
            first.kill()
            first.wait()
        second = start_console_proxy(port, [ORIGIN], tmp_path / "second.log")
    finally:
        first.kill()
        if second is not None:
            stop(second)
        machine.stop()
    session.refresh_from_db()
    assert session.ended_at is not None and session.close_reason == ORPHANED
    assert (session.bytes_to_guest, session.bytes_from_guest) == (8, 8)
