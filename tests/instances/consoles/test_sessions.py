"""Console session records: a proxy that starts closes what its killed predecessor left open."""

import socket
import subprocess
import sys

import pytest
from django.utils import timezone

from instances.consoles.proxies import this_proxy
from instances.consoles.sessions import ORPHANED, console_sessions_close_orphaned
from instances.models import ConsoleSession, Instance
from instances.services.instances import instance_create
from tests.factories import instance_request
from tests.services import ROOT

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
