"""Device tasks on the worker: errors the backend calls retryable are tried again; a task that
fails for good says so on the instance. (Snapshots: test_snapshots.)"""

import errno

import pytest

from instances import tasks
from instances.backends.base import BackendError
from instances.choices import CarrierState, LinkState, Outcome, PowerState
from instances.models import AuditEvent, NetworkInterface
from instances.services import device_work


class PluggingBackend:
    name = "plugging"

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def attach_disk(self, spec, disk) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        raise self.error


@pytest.mark.django_db(transaction=True)
def test_a_hotplug_that_fails_says_so_on_the_instance(on_backend):
    backend = PluggingBackend(BackendError("No free PCIe root port for another disk."))
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    assert tasks.disk_hotplug.apply(args=[instance.disks.get().pk]).failed()
    assert backend.calls == 1
    event = AuditEvent.objects.get(action="instance.disk_hotplug")
    assert (event.outcome, event.target_id) == (Outcome.FAILURE, str(instance.pk))
    assert event.message == (
        "Plugging in web-1-root failed: No free PCIe root port for another disk. "
        "web-1-root was left detached."
    )


@pytest.mark.django_db(transaction=True)
def test_a_hotplug_that_finds_the_host_disk_full_leaves_the_disk_free_saying_why(on_backend):
    backend = PluggingBackend(OSError(errno.ENOSPC, "No space left on device"))
    instance = on_backend(backend, power_state=PowerState.RUNNING, hotplugged_disks=1)
    disk = instance.disks.get()
    assert tasks.disk_hotplug.apply(args=[disk.pk]).failed()
    disk.refresh_from_db()
    assert disk.instance is None
    assert disk.message == (
        "Plugging in web-1-root failed: the host's disk is full: free space on it, then try again."
    )
    instance.refresh_from_db()
    assert instance.hotplugged_disks == 0


class LinkBackend:
    """Sets links; `meanwhile` runs during the first, as the user's next click would."""

    name = "links"

    def __init__(self, meanwhile) -> None:  # type: ignore[no-untyped-def]
        self.meanwhile = meanwhile
        self.applied: list[bool] = []

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        if not self.applied:
            self.meanwhile()
        self.applied.append(up)
        return True


@pytest.mark.django_db
def test_a_link_toggled_again_during_its_task_ends_as_the_last_click_asked(on_backend):
    def toggled_back_up() -> None:
        NetworkInterface.objects.filter(pk=nic.pk).update(link_desired=LinkState.UP)

    backend = LinkBackend(toggled_back_up)
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    nic = instance.nics.get()
    NetworkInterface.objects.filter(pk=nic.pk).update(link_desired=LinkState.DOWN)
    device_work.machine_set_link(nic.pk)
    assert backend.applied == [False, True]
    assert NetworkInterface.objects.get(pk=nic.pk).carrier == CarrierState.UP
