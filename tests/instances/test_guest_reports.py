"""The guest agent's reports as pages and the API show them: kept per instance by the host's
worker, shown only for the guest as it runs now (the real agent is in test_machines_integration)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.backends.base import GuestFacts, GuestInterface
from instances.choices import CarrierState, PowerState
from instances.models import GuestReport, Instance, NetworkInterface
from instances.services import guest_reports
from instances.services.guest_reports import _kept, guest_reports_host

pytestmark = pytest.mark.django_db

FACTS = {
    "hostname": "web-1",
    "interfaces": [
        {"name": "eth0", "mac": "52:54:00:aa:bb:cc", "addresses": ["10.20.0.7/24"], "carrier": True}
    ],
    "memory_total_kb": 1_000_000,
    "memory_available_kb": 750_000,
    "filesystems": [
        {"mountpoint": "/data", "type": "ext4", "device": "vdb", "total_bytes": 2 * 1024**3,
         "used_bytes": 512 * 1024**2},
    ],
}  # fmt: skip


def overview(client, instance) -> str:
    url = f"/projects/alpha/instances/{instance.pk}/?tab=overview"
    page = client.get(url)
    assert page.status_code == 200
    return page.content.decode()


def report(instance, *, at=None, error=""):
    now = timezone.now()
    return GuestReport.objects.create(
        instance=instance, reported_at=at or now, asked_at=now - timedelta(minutes=1),
        error=error, **FACTS,
    )  # fmt: skip


def test_a_report_of_the_running_guest_shows_its_addresses_memory_and_filesystems(
    client_for, running
):
    report(running)
    html = overview(client_for("viewer"), running)
    assert 'data-testid="guest-report"' in html
    assert "web-1" in html and "eth0 52:54:00:aa:bb:cc 10.20.0.7/24</span> " in html
    assert ">carrier</span>" in html
    assert "Memory: 244.1\xa0MB of 976.6\xa0MB in use (25%)" in html
    assert "/data" in html and "512.0\xa0MB of 2.0\xa0GB used" in html


def test_a_report_from_before_the_guest_last_started_is_not_shown(client_for, running):
    report(running, at=timezone.now() - timedelta(minutes=5))
    Instance.objects.filter(pk=running.pk).update(state_changed_at=timezone.now())
    html = overview(client_for("viewer"), running)
    assert "10.20.0.7/24" not in html
    assert "Waiting for the guest agent (qemu-ga in the guest): it is asked every 30 s" in html


def test_a_stopped_instance_shows_no_report(client_for, running):
    report(running)
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    html = overview(client_for("viewer"), running)
    assert "Reports while the instance runs." in html and "10.20.0.7/24" not in html


def test_a_guest_whose_agent_does_not_answer_says_why(client_for, running, settings):
    # the database says it runs; its host has no such machine, so the backend says so
    guest_reports_host(running.host)
    kept = GuestReport.objects.get(instance=running)
    assert kept.reported_at is None and kept.asked_at is not None
    assert kept.error == f"Machine {running.machine_id} is not running."
    html = overview(client_for("viewer"), running)
    assert f"Latest answer: Machine {running.machine_id} is not running." in html


def test_a_failed_ask_keeps_the_last_facts_and_says_what_happened_since(client_for, running):
    report(running)
    guest_reports_host(running.host)
    kept = GuestReport.objects.get(instance=running)
    assert kept.hostname == "web-1" and kept.error
    html = overview(client_for("viewer"), running)
    assert "10.20.0.7/24" in html and "since then: Machine" in html


def test_a_guest_asked_moments_ago_by_another_run_is_not_asked_again(running):
    report(running)
    GuestReport.objects.filter(instance=running).update(asked_at=timezone.now())
    guest_reports_host(running.host)
    assert GuestReport.objects.get(instance=running).error == ""  # not asked: nothing failed


def test_what_a_guest_says_is_kept_only_in_the_shapes_shown(client_for, api_for, running):
    facts = GuestFacts(
        hostname="h" * 999,
        interfaces=(GuestInterface(name=1, mac=None, addresses=("10.0.0.9/24", 7), carrier="1"),),  # type: ignore[arg-type]
        memory_total_kb="lots",  # type: ignore[arg-type]
        filesystems=({"mountpoint": "/", "total_bytes": "x", "used_bytes": -1}, "junk"),  # type: ignore[arg-type]
    )
    kept = _kept(facts)
    assert len(kept["hostname"]) == 255 and kept["memory_total_kb"] == 0
    assert kept["interfaces"] == [
        {"name": "1", "mac": "", "addresses": ["10.0.0.9/24", "7"], "carrier": None}
    ]
    assert kept["filesystems"] == [
        {"mountpoint": "/", "type": "", "device": "", "total_bytes": None, "used_bytes": None}
    ]
    now = timezone.now()
    GuestReport.objects.create(instance=running, reported_at=now, asked_at=now, **kept)
    assert api_for("viewer").get(f"/projects/alpha/instances/{running.pk}").status_code == 200
    assert "10.0.0.9/24" in overview(client_for("viewer"), running)


def test_only_running_instances_on_the_host_are_asked(running, project, operator):
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    guest_reports_host(running.host)
    assert not GuestReport.objects.exists()


def test_the_api_gives_the_report_of_the_running_guest_only(api_for, running):
    report(running)
    api = api_for("viewer")
    guest = api.get(f"/projects/alpha/instances/{running.pk}").json()["guest"]
    assert guest["hostname"] == "web-1"
    assert guest["interfaces"] == FACTS["interfaces"]
    assert guest["memory_available_kb"] == 750_000
    assert guest["filesystems"][0]["mountpoint"] == "/data"
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    assert api.get(f"/projects/alpha/instances/{running.pk}").json()["guest"] is None


def carrier_seen(instance, host_up, *, guest_carrier, reported_ago=0, link_set_ago=None):
    """The carrier of the instance's eth0 given what the host set and the guest reported."""
    nic = instance.nics.get()
    now = timezone.now()
    if link_set_ago is not None:
        NetworkInterface.objects.filter(pk=nic.pk).update(
            link_changed_at=now - timedelta(seconds=link_set_ago)
        )
    interface = {"name": "eth0", "mac": nic.mac.upper(), "addresses": [], "carrier": guest_carrier}
    GuestReport.objects.update_or_create(
        instance=instance,
        defaults={"reported_at": now - timedelta(seconds=reported_ago), "asked_at": now,
                  "interfaces": [interface]},
    )  # fmt: skip
    nic.refresh_from_db()
    return nic.carrier_seen(host_up, GuestReport.objects.get(instance=instance))


def test_the_carrier_is_down_when_the_host_or_the_guest_says_so(running):
    Instance.objects.filter(pk=running.pk).update(
        state_changed_at=timezone.now() - timedelta(minutes=1)
    )
    running.refresh_from_db()
    assert carrier_seen(running, True, guest_carrier=True) == CarrierState.UP
    assert carrier_seen(running, True, guest_carrier=None) == CarrierState.UP  # did not say
    assert carrier_seen(running, True, guest_carrier=False) == CarrierState.DOWN
    assert carrier_seen(running, False, guest_carrier=True) == CarrierState.DOWN
    # the guest saw no carrier before the link was set up again: its word is out of date
    assert (
        carrier_seen(running, True, guest_carrier=False, reported_ago=10, link_set_ago=5)
        == CarrierState.UP
    )
    assert (
        carrier_seen(running, True, guest_carrier=False, reported_ago=5, link_set_ago=10)
        == CarrierState.DOWN
    )
    # a report from before the instance last started describes an earlier run
    assert carrier_seen(running, True, guest_carrier=False, reported_ago=120) == CarrierState.UP
    assert running.nics.get().carrier_seen(True, None) == CarrierState.UP


class SpeakingBackend:
    """Guests whose agents say what `facts` holds for them."""

    name = "speaking"

    def __init__(self) -> None:
        self.facts: dict[str, GuestFacts] = {}

    def guest_facts(self, machine_id: str) -> GuestFacts:
        return self.facts[machine_id]


def facts_with(address: str) -> GuestFacts:
    eth0 = GuestInterface(name="eth0", mac="52:54:00:aa:bb:cc", addresses=(address,), carrier=True)
    return GuestFacts(hostname="web-1", interfaces=(eth0,), memory_total_kb=1_000_000)


def a_round(instance) -> list[str]:  # type: ignore[no-untyped-def]
    """A round with every guest due; the SQL of its writes."""
    long_ago = timezone.now() - timedelta(hours=1)
    GuestReport.objects.filter(instance=instance).update(asked_at=long_ago)
    with CaptureQueriesContext(connection) as captured:
        guest_reports_host(instance.host)
    return [query["sql"] for query in captured if query["sql"].startswith("UPDATE")]


def test_a_guest_that_says_the_same_again_only_moves_its_report_time_on(on_backend, monkeypatch):
    backend = SpeakingBackend()
    monkeypatch.setattr(guest_reports, "LOCAL_BACKENDS", frozenset({backend.name}))
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    backend.facts[instance.machine_id] = facts_with("10.20.0.7/24")
    a_round(instance)
    first = GuestReport.objects.get(instance=instance)

    writes = a_round(instance)
    again = GuestReport.objects.get(instance=instance)
    assert again.reported_at > first.reported_at and again.interfaces == first.interfaces
    assert not any('"interfaces"' in sql for sql in writes)  # the claim and the time only

    backend.facts[instance.machine_id] = facts_with("10.20.0.8/24")
    a_round(instance)
    changed = GuestReport.objects.get(instance=instance)
    assert changed.interfaces[0]["addresses"] == ["10.20.0.8/24"]
    assert changed.reported_at > again.reported_at


def test_a_batch_of_unchanged_reports_never_moves_a_report_back_in_time(running):
    written = report(running)  # a report written while the round's batch waited
    batch = guest_reports._Unchanged()
    batch.add(written.pk, written.reported_at - timedelta(seconds=5))
    batch.flush()
    assert GuestReport.objects.get(pk=written.pk).reported_at == written.reported_at
    batch.add(written.pk, written.reported_at + timedelta(seconds=5))
    batch.flush()
    assert GuestReport.objects.get(pk=written.pk).reported_at > written.reported_at
