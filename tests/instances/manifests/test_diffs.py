"""Applying a manifest to an instance that exists: only what differs changes, through the
services; what the instance was created with cannot change."""

import pytest

from instances.choices import PowerState
from instances.models import AuditEvent, Disk, Instance
from tests.factories import SubnetFactory
from tests.instances.manifests.conftest import MANIFEST

pytestmark = pytest.mark.django_db


def at(line: int) -> str:
    """Where a problem of web-1 is: the line of its field."""
    return f"instance.yaml:{line} (instance web-1)"


TWO_NICS = MANIFEST.replace(
    "    - {subnet: backend}", "    - {subnet: backend}\n    - {subnet: backend}"
)


@pytest.fixture
def created(apply):
    apply(MANIFEST)
    return Instance.objects.get(name="web-1")


def events_after(count):
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True)[count:])


def test_applying_the_same_manifest_again_changes_nothing(
    apply, created, django_capture_on_commit_callbacks
):
    events = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks() as callbacks:
        output = apply(MANIFEST)
    assert output.splitlines() == [
        "  instance alpha/web-1 (unchanged)",
        "Applied: 0 created, 0 changed, 1 unchanged.",
    ]
    assert AuditEvent.objects.count() == events
    assert callbacks == []


def test_a_started_instance_with_every_default_spelled_out_is_unchanged(apply):
    manifest = MANIFEST.replace(
        "  zone: local-1a",
        "  zone: local-1a\n  run_strategy: Always\n  vcpus: 1\n  memory_gb: 1\n"
        "  bootloader: bios\n  user_data_mode: default\n  ssh_keys: []\n  root_bus: auto",
    ).replace("{subnet: backend}", "{subnet: backend, model: virtio, link: up}")
    apply(manifest)
    assert "(unchanged)" in apply(manifest)


def test_the_run_strategy_changes_through_the_service(apply, created, operator):
    events = AuditEvent.objects.count()
    output = apply(MANIFEST.replace("  zone:", "  run_strategy: Always\n  zone:"))
    assert output.splitlines() == [
        "~ instance alpha/web-1 (change)",
        "    ~ run_strategy Manual -> Always",
        "Applied: 0 created, 1 changed, 0 unchanged.",
    ]
    created.refresh_from_db()
    assert (created.run_strategy, created.power_state) == ("Always", PowerState.STARTING)
    assert events_after(events) == ["instance.set_run_strategy", "instance.start"]
    assert AuditEvent.objects.get(action="instance.set_run_strategy").actor == operator


def test_disks_grow_and_are_added(apply, created):
    manifest = MANIFEST.replace("root_size_gb: 2", "root_size_gb: 4").replace(
        "    - {name: web-1-data, size_gb: 10}",
        "    - {name: web-1-data, size_gb: 20}\n    - {size_gb: 5}",
    )
    assert apply(manifest).splitlines()[:4] == [
        "~ instance alpha/web-1 (change)",
        "    ~ disk web-1-root: size 2 GB -> 4 GB",
        "    ~ disk web-1-data: size 10 GB -> 20 GB",
        "    + disk web-1-disk2 5 GB (secondary)",
    ]
    sizes = dict(created.disks.values_list("name", "size_gb"))
    assert sizes == {"web-1-root": 4, "web-1-data": 20, "web-1-disk2": 5}
    assert "(unchanged)" in apply(manifest)  # the default name matches on the next run


def test_a_disk_left_out_is_detached_and_comes_back_when_listed_again(apply, created):
    without = MANIFEST.replace("  disks:\n    - {name: web-1-data, size_gb: 10}\n", "")
    assert "    - disk web-1-data (detach: it stays in the project)" in apply(without)
    data = Disk.objects.get(name="web-1-data")
    assert data.instance is None
    assert "    + disk web-1-data (attach the existing 10 GB disk)" in apply(MANIFEST)
    data.refresh_from_db()
    assert data.instance == created


def test_interfaces_are_added_and_removed_by_position(apply, created, project):
    SubnetFactory(project=project, name="storage", cidr_v4="10.50.0.0/24")
    three = TWO_NICS.replace(
        "    - {subnet: backend}\n    - {subnet: backend}",
        "    - {subnet: backend}\n    - {subnet: backend}\n    - {subnet: storage, ipv4: 10.50.0.9}",
    )
    assert apply(three).splitlines()[1:3] == [
        "    + nic eth1 on backend",
        "    + nic eth2 on storage (10.50.0.9)",
    ]
    assert list(created.nics.values_list("index", "subnet__name")) == [
        (0, "backend"),
        (1, "backend"),
        (2, "storage"),
    ]
    assert apply(MANIFEST).splitlines()[1:3] == [
        "    - nic eth1 (on backend)",
        "    - nic eth2 (on storage)",
    ]
    assert list(created.nics.values_list("index", flat=True)) == [0]


def test_link_states_follow_the_manifest(apply, created):
    apply(TWO_NICS)
    down = TWO_NICS.replace(
        "    - {subnet: backend}\n    - {subnet: backend}",
        "    - {subnet: backend}\n    - {subnet: backend, link: down}",
    )
    assert "    ~ nic eth1: link up -> down" in apply(down).splitlines()
    assert created.nics.get(index=1).link_desired == "down"


def test_taking_eth0_down_needs_confirm_primary(apply, refused, created):
    down = MANIFEST.replace("{subnet: backend}", "{subnet: backend, link: down}")
    assert refused(down).problems == [
        f"{at(11)}: nics-0-link: eth0 is the primary interface: taking its link down can cut "
        "the instance off the network. Confirm to continue. (Set confirm_primary: true on this "
        "interface to take it down anyway.)"
    ]
    apply(down.replace("link: down", "link: down, confirm_primary: true"))
    assert created.nics.get().link_desired == "down"


def test_what_the_instance_was_created_with_cannot_change(refused, created):
    refusal = refused(
        MANIFEST.replace(
            "  zone:", "  vcpus: 2\n  bootloader: uefi\n  run_strategy: Always\n  zone:"
        )
        .replace("{name: web-1-data, size_gb: 10}", "{name: web-1-data, size_gb: 10, bus: sata}")
        .replace("{subnet: backend}", "{subnet: backend, ipv4: 10.20.0.7}")
    )
    assert refusal.problems == [
        f"{at(5)}: vcpus: Cannot change on an existing instance: web-1 has 1, the manifest says "
        "2. Keep 1, or create a new instance under another name.",
        f"{at(6)}: bootloader: Cannot change on an existing instance: web-1 has bios, the "
        "manifest says uefi. Keep bios, or create a new instance under another name.",
        f"{at(12)}: disks-0-bus: A disk's bus cannot change: web-1-data has auto, the manifest "
        "says sata. Keep auto, or add a new disk under another name.",
        f"{at(14)}: nics-0-ipv4: An interface's ipv4 cannot change: eth0 has 10.20.0.2, the "
        "manifest says 10.20.0.7. Keep 10.20.0.2, or remove the interface and add a new one.",
    ]
    created.refresh_from_db()
    assert created.run_strategy == "Manual"  # the run strategy was not half-applied


def test_a_disk_does_not_shrink_and_nothing_else_is_applied(refused, created):
    refusal = refused(
        MANIFEST.replace("size_gb: 10}", "size_gb: 5}").replace(
            "  zone:", "  run_strategy: Halted\n  zone:"
        )
    )
    assert refusal.problems == [
        f"{at(10)}: disks-0-size_gb: Disks can only grow: enter more than the current 10 GB."
    ]
    created.refresh_from_db()
    assert created.run_strategy == "Manual"


def test_interfaces_are_removed_only_from_a_stopped_instance(apply, refused, created):
    apply(TWO_NICS)
    Instance.objects.filter(pk=created.pk).update(power_state=PowerState.RUNNING)
    assert refused(MANIFEST).problems == [
        f"{at(10)}: nics: Stop the instance before removing an interface. (eth1 is not in the "
        "manifest)"
    ]
    assert created.nics.count() == 2


def test_an_instance_keeps_at_least_one_interface(refused, created):
    refusal = refused(MANIFEST.replace("  nics:\n    - {subnet: backend}\n", "  nics: []\n"))
    assert refusal.problems == [f"{at(10)}: nics: Attach the instance to at least one subnet."]
