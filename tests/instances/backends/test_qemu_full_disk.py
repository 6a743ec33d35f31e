"""A real guest whose disk lives on a filesystem that fills up: QEMU pauses it at the write,
the console says Paused (disk full) and what to do, refuses to plug a disk meanwhile, and
Resume lets the guest run on once space is freed. A disk plugged into a running guest while
the disk is full is left free, saying why, with no file made.

The machines live on a tmpfs of a few MiB this test mounts (as root) and unmounts.
"""

import contextlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from instances import tasks
from instances.backends import backend_named
from instances.backends.base import BackendError
from instances.choices import DiskBus, PowerState
from instances.errors import ActionRefused
from instances.models import AuditEvent, Disk, Instance
from instances.power_operations import POWER
from instances.services import machines, power, reconciler, storage
from instances.services.instances import DiskRequest
from instances.specs import disk_spec
from tests import factories

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BOOT_TIMEOUT = 90
MIB = 2**20


@pytest.fixture
def small_disk(settings, machines_root):
    """Machines on a 48 MiB tmpfs (the netns and all else as machines_root sets them)."""
    folder = Path(tempfile.mkdtemp(prefix="zf", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=700", "tmpfs", folder], check=True)
    settings.ZOPDAY_MACHINES_DIR = folder
    backend_named.cache_clear()
    yield folder
    backend = backend_named("qemu")
    for machine_id in backend.running_machines():
        backend.force_stop(machine_id)
    backend_named.cache_clear()
    subprocess.run(["umount", "--lazy", folder], check=True)
    folder.rmdir()


def wait_for(predicate, what: str, timeout: float = BOOT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return result


def reconciled(vm: Instance) -> Instance:
    """One reconciler pass over the instance's host (what beat asks every few seconds)."""
    reconciler.reconcile_host(vm.host)
    vm.refresh_from_db()
    return vm


def claimed_and_run(vm: Instance, operation: str, actor) -> None:
    """Ask as a user would, then do the host task's work here (the test has no host worker)."""
    power.instance_power(instance=vm, actor=actor, operation=POWER[operation])
    vm.refresh_from_db()
    getattr(machines, f"machine_{operation}")(vm.pk, vm.state_changed_at.isoformat())
    vm.refresh_from_db()


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def test_a_guest_paused_on_a_full_disk_reads_so_refuses_a_plug_and_resumes_once_freed(
    small_disk, project, operator, host_queue_of
):
    lan = factories.SubnetFactory(
        project=project, name="lan", cidr_v4="10.87.0.0/24", gateway="10.87.0.1", dns_resolvers=""
    )
    vm = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan, name="full-1", ip="10.87.0.10",
        disks=[DiskRequest(size_gb=1, bus=DiskBus.VIRTIO, name="data")],
    )  # fmt: skip
    host_queue_of(vm)  # no worker reads its host's queue: this test does the host's work
    Disk.objects.filter(instance=vm).update(host=vm.host)
    vm.refresh_from_db()
    backend = backend_named("qemu")
    claimed_and_run(vm, "start", operator)
    assert vm.power_state == PowerState.RUNNING
    serial = backend.serial_log(vm.machine_id)
    wait_for(lambda: serial.exists() and b"root@full-1:/# " in serial.read_bytes(), "a prompt")

    ballast = small_disk / "ballast"  # all but 8 MiB, freed later to let the guest go on
    ballast.write_bytes(b"\1" * (free_bytes(small_disk) - 8 * MIB))
    fill = (
        'for d in /sys/block/vd*; do [ "$(cat $d/serial)" = data ] && dev=/dev/${d##*/}; done; '
        "i=0; while [ $i -lt 24 ]; do dd if=/dev/zero of=$dev bs=1M count=4 seek=$i "
        "conv=fsync; i=$((i+4)); done; echo filled > /dev/console"
    )
    with contextlib.suppress(BackendError):  # the guest may pause before its agent answers
        backend.guest_exec(vm.machine_id, ["sh", "-c", f"({fill}) </dev/null >/dev/null 2>&1 &"])

    wait_for(lambda: reconciled(vm).power_state == PowerState.PAUSED, "the guest to pause")
    assert vm.get_power_state_display() == "Paused (disk full)"
    assert "Free space on the host" in vm.power_message and "Resume" in vm.power_message
    with pytest.raises(ActionRefused, match="free space on the host, then Resume"):
        power.instance_power(instance=vm, actor=operator, operation=POWER["restart"])
    with pytest.raises(ActionRefused, match="free space on the host, then Resume"):
        storage.disk_add(instance=vm, actor=operator, name="more", size_gb=1, bus=DiskBus.VIRTIO)
    assert not Disk.objects.filter(name="more").exists()
    assert reconciled(vm).power_state == PowerState.PAUSED  # it stays so, pass after pass

    ballast.unlink()
    claimed_and_run(vm, "resume", operator)
    assert vm.power_state == PowerState.RUNNING
    wait_for(lambda: b"filled" in serial.read_bytes(), "the guest to finish its writes")
    assert reconciled(vm).power_state == PowerState.RUNNING
    claimed_and_run(vm, "force_stop", operator)
    assert vm.power_state == PowerState.STOPPED


def test_a_disk_plugged_while_the_host_disk_is_full_is_left_free_saying_why(
    small_disk, project, operator, host_queue_of
):
    lan = factories.SubnetFactory(
        project=project, name="lan", cidr_v4="10.88.0.0/24", gateway="10.88.0.1", dns_resolvers=""
    )
    vm = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan, name="full-2", ip="10.88.0.10"
    )
    host_queue_of(vm)  # no worker reads its host's queue: this test does the host's work
    claimed_and_run(vm, "start", operator)
    assert vm.power_state == PowerState.RUNNING
    backend = backend_named("qemu")
    ballast = small_disk / "ballast"  # every byte left: not even a new disk's header fits
    with contextlib.suppress(OSError), ballast.open("wb") as filling:
        while True:
            filling.write(b"\1" * MIB)
            filling.flush()

    more = storage.disk_add(instance=vm, actor=operator, name="more", size_gb=1, bus=DiskBus.VIRTIO)
    assert tasks.disk_hotplug.apply(args=[more.pk]).failed()
    more.refresh_from_db()
    assert more.instance is None and "No space left on device" in more.message
    assert not backend._run_folder(vm.machine_id).disk_path(disk_spec(more).name).exists()
    event = AuditEvent.objects.get(action="instance.disk_hotplug")
    assert event.message.endswith("more was left detached.")
    assert Instance.objects.get(pk=vm.pk).hotplugged_disks == 0

    ballast.unlink()
    storage.disk_attach(disk=more, instance=vm, actor=operator)
    assert tasks.disk_hotplug.apply(args=[more.pk]).successful()
    more.refresh_from_db()
    assert more.instance == vm and more.message == ""
    assert backend._run_folder(vm.machine_id).disk_path(disk_spec(more).name).exists()
    claimed_and_run(vm, "force_stop", operator)
