"""Applying is all or nothing; a dry run shows the diff, finds the same problems, and keeps
nothing: no rows, no audit events, no queued tasks."""

import pytest

from instances.models import AuditEvent, Disk, Instance, IPLease, NetworkInterface
from tests.broker import BrokerQueue
from tests.instances.manifests.conftest import MANIFEST

pytestmark = pytest.mark.django_db

ALWAYS = MANIFEST.replace("  zone:", "  run_strategy: Always\n  zone:")


@pytest.fixture
def queue(settings):
    """The queue of the host that instances made here are placed on: no worker reads it, so the
    tasks the code sends stay there for the test to read back from the real broker."""
    settings.ZOPDAY_HOST = "test-manifests"
    queue = BrokerQueue("host.test-manifests")
    yield queue
    queue.forget()


def rows():
    return [
        model.objects.count() for model in (Instance, Disk, NetworkInterface, IPLease, AuditEvent)
    ]


def test_a_dry_run_prints_the_diff_and_creates_nothing(
    apply, queue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        output = apply(ALWAYS, "--dry-run")
    assert output.splitlines() == [
        "+ instance alpha/web-1 (create)",
        "    + disk web-1-root 2 GB (root, image demo)",
        "    + disk web-1-data 10 GB (secondary)",
        "    + nic eth0 on backend",
        "Dry run, nothing changed: 1 to create, 0 to change, 0 unchanged.",
    ]
    assert rows() == [0, 0, 0, 0, 0]
    assert callbacks == [] and queue.sent() == []


def test_the_same_run_without_dry_run_queues_the_start(
    apply, queue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        apply(ALWAYS)
    assert [message.task for message in queue.sent()] == ["instances.machine_start"]


def test_a_dry_run_changes_nothing_on_an_existing_instance(
    apply, queue, django_capture_on_commit_callbacks
):
    apply(MANIFEST)
    before = rows()
    changed = ALWAYS.replace("size_gb: 10}", "size_gb: 20}")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        output = apply(changed, "--dry-run")
    assert output.splitlines() == [
        "~ instance alpha/web-1 (change)",
        "    ~ disk web-1-data: size 10 GB -> 20 GB",
        "    ~ run_strategy Manual -> Always",
        "Dry run, nothing changed: 0 to create, 1 to change, 0 unchanged.",
    ]
    assert rows() == before
    instance = Instance.objects.get()
    assert (instance.run_strategy, instance.power_state) == ("Manual", "stopped")
    assert instance.disks.get(name="web-1-data").size_gb == 10
    assert callbacks == [] and queue.sent() == []


def test_a_dry_run_finds_what_only_the_services_check(refused, apply, subnet):
    apply(MANIFEST.replace("{subnet: backend}", "{subnet: backend, mac: '52:54:00:aa:bb:cc'}"))
    other = MANIFEST.replace("web-1", "web-2").replace(
        "{subnet: backend}", "{subnet: backend, mac: '52:54:00:AA:BB:CC'}"
    )
    refusal = refused(other, "--dry-run")
    assert refusal.problems == [
        "instance.yaml:11 (instance web-2): nics-0-mac: 52:54:00:aa:bb:cc is already used by "
        "another interface."
    ]
    assert not Instance.objects.filter(name="web-2").exists()


def test_one_refused_document_keeps_every_other_from_being_applied(refused, apply):
    apply(MANIFEST)
    before = rows()
    first = ALWAYS.replace("size_gb: 10}", "size_gb: 20}")
    second = MANIFEST.replace("web-1", "web-2").replace("zone: local-1a", "zone: mars-1")
    third = MANIFEST.replace("web-1", "web-3").replace("root_size_gb: 2", "root_size_gb: 0")
    refusal = refused("---\n".join([first, second, third]))
    assert refusal.problems == [
        "instance.yaml:18 (instance web-2): zone: Choose one of the zones: local-1a, local-1b.",
        "instance.yaml:32 (instance web-3): root_size_gb: Disk size must be between 1 and 16384 GB.",
    ]
    assert rows() == before
    instance = Instance.objects.get()
    assert (instance.run_strategy, instance.disks.get(name="web-1-data").size_gb) == ("Manual", 10)


def test_several_documents_are_applied_together(apply):
    second = MANIFEST.replace("web-1", "web-2")
    output = apply(MANIFEST + "---\n" + second)
    assert output.splitlines()[-1] == "Applied: 2 created, 0 changed, 0 unchanged."
    assert list(Instance.objects.values_list("name", flat=True)) == ["web-1", "web-2"]
    output = apply(MANIFEST + "---\n" + second.replace("size_gb: 10}", "size_gb: 11}"))
    assert output.splitlines()[-1] == "Applied: 0 created, 1 changed, 1 unchanged."
