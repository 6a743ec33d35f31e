"""Disks, snapshots and CD-ROMs driven through the services and a real Celery worker, on each
platform: this console's QEMU hosts and a KubeVirt cluster (the fake, whose VMIs are real QEMU
guests). What KubeVirt cannot do, the console refuses at the row instead."""

import io
from pathlib import Path

import pycdlib
import pytest

from instances.choices import DiskBus, DiskRole, ImageKind, PowerState, SnapshotState
from instances.errors import ActionRefused
from instances.models import Disk, DiskSnapshot, Instance
from instances.services import power, snapshots, storage
from instances.services.instances import DiskRequest
from tests import factories
from tests.factories import ImageFactory
from tests.instances.platforms import Platform
from tests.instances.test_machines_integration import (
    run_in,
    wait_for,
    wait_for_prompt,
    wait_for_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECTORS_PER_GB = 2 * 2**20  # /sys/block/*/size counts 512-byte sectors; a disk's GB are GiB
ISO_LABEL = 32808  # the primary volume descriptor's volume identifier: 32 bytes at 0x8028


@pytest.fixture
def demo_image():
    return factories.demo_image()


@pytest.fixture
def lan(platform, project):
    return platform.lan(project)


def started(platform: Platform, operator, vm: Instance, boots: int = 1) -> Instance:
    """The instance, started through the console, its guest at the prompt of its boots-th boot."""
    if vm.power_state != PowerState.RUNNING:
        power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm, count=platform.runs_in_log(boots))
    return vm


def block_devices(platform: Platform, vm: Instance) -> dict[str, tuple[str, int]]:
    """The guest's disks: kernel name -> (serial where virtio gives one, size in sectors)."""
    script = (
        "for d in /sys/block/vd* /sys/block/sd*; do [ -e $d/size ] || continue; "
        's=$(cat $d/serial 2>/dev/null); echo "$(basename $d) ${s:--} $(cat $d/size)"; done'
    )
    lines = run_in(platform, vm, script).splitlines()
    return {name: (serial, int(size)) for name, serial, size in (line.split() for line in lines)}


def test_virtio_and_sata_secondary_disks_are_seen_and_a_virtio_one_is_hot_plugged(
    platform, project, operator, demo_image, lan
):
    vm = platform.make(
        operator, demo_image, lan, "disks-vm", "10.88.0.50",
        disks=[DiskRequest(size_gb=2, bus=DiskBus.VIRTIO, name="fast"),
               DiskRequest(size_gb=3, bus=DiskBus.SATA, name="slow")],
    )  # fmt: skip
    started(platform, operator, vm)
    seen = block_devices(platform, vm)
    virtio = {serial: size for name, (serial, size) in seen.items() if name.startswith("vd")}
    sata = [size for name, (_, size) in seen.items() if name.startswith("sd")]
    assert virtio["fast"] == 2 * SECTORS_PER_GB, seen
    assert sata == [3 * SECTORS_PER_GB], seen

    storage.disk_add(instance=vm, actor=operator, name="plugged", size_gb=4, bus=DiskBus.VIRTIO)

    def plugged() -> int | None:
        return {s: size for n, (s, size) in block_devices(platform, vm).items()}.get("plugged")

    assert wait_for(plugged, "the hot-plugged disk in the guest", 120) == 4 * SECTORS_PER_GB
    run_in(platform, vm, "ls /dev/vd* >/dev/null")  # the guest still answers with it plugged in
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)


def test_a_running_instances_disk_grows_and_its_guest_sees_it_grown_after_a_restart_too(
    platform, project, operator, demo_image, lan
):
    vm = platform.make(
        operator, demo_image, lan, "grow-vm", "10.88.0.51",
        disks=[DiskRequest(size_gb=1, bus=DiskBus.VIRTIO, name="grows")],
    )  # fmt: skip
    started(platform, operator, vm)

    def size_seen() -> int | None:
        return {s: size for n, (s, size) in block_devices(platform, vm).items()}.get("grows")

    assert size_seen() == SECTORS_PER_GB
    disk = vm.disks.get(name="grows")
    storage.disk_resize(disk=disk, actor=operator, size_gb=2)  # on KubeVirt: its claim grows
    wait_for(lambda: size_seen() == 2 * SECTORS_PER_GB, "the guest to see the disk grown", 120)
    assert Disk.objects.get(pk=disk.pk).size_gb == 2
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    started(platform, operator, vm, boots=2)
    assert size_seen() == 2 * SECTORS_PER_GB
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)


def settled(snapshot: DiskSnapshot, timeout: float = 300) -> DiskSnapshot:
    def done() -> bool:
        snapshot.refresh_from_db()
        return snapshot.state in (SnapshotState.READY, SnapshotState.FAILED)

    wait_for(done, f"snapshot {snapshot.name} to settle (it is {snapshot.state})", timeout)
    return snapshot


def test_a_running_disk_is_snapshotted_frozen_and_reverted_to_its_old_content(
    platform, project, operator, demo_image, lan
):
    vm = started(
        platform, operator, platform.make(operator, demo_image, lan, "snap-vm", "10.88.0.51")
    )
    run_in(platform, vm, "echo before > /data/note && sync")
    root = vm.disks.get(role=DiskRole.ROOT)
    taken = settled(snapshots.disk_snapshot(disk=root, actor=operator, name="before"))
    assert taken.state == SnapshotState.READY, taken.message
    assert taken.consistent  # the guest agent froze the filesystems around it
    run_in(platform, vm, "echo after > /data/note && sync")

    power.instance_shutdown(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=120)
    snapshots.disk_snapshot_revert(snapshot=taken, actor=operator, confirm=True)
    reverted = settled(taken)
    assert reverted.state == SnapshotState.READY, reverted.message
    started(platform, operator, vm, boots=2)
    assert run_in(platform, vm, "cat /data/note") == "before"
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)


def data_iso(path: Path, label: str) -> Path:
    """An ISO 9660 image with a volume label and one file that names it."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident=label)
    body = f"{label}\n".encode()
    iso.add_fp(io.BytesIO(body), len(body), "/LABEL.TXT;1")
    iso.write(str(path))
    iso.close()
    return path


def cd_label(platform: Platform, vm: Instance) -> str:
    """The volume label of the medium in the guest's CD-ROM drive ("" when it has none)."""
    script = f"dd if=/dev/sr0 bs=1 skip={ISO_LABEL} count=32 2>/dev/null; true"
    return run_in(platform, vm, script).strip()


def test_a_cdrom_shows_its_iso_and_changes_media_where_the_platform_can(
    platform, project, operator, demo_image, lan, tmp_path, request
):
    first, second = (
        ImageFactory(
            kind=ImageKind.ISO, name=name, path=str(data_iso(tmp_path / f"{name}.iso", label))
        )
        for name, label in (("tools", "ZOPDAY_TOOLS"), ("drivers", "ZOPDAY_DRIVERS"))
    )
    vm = platform.make(
        operator, demo_image, lan, "cd-vm", "10.88.0.52",
        disks=[DiskRequest(size_gb=0, role=DiskRole.CDROM, image=first, name="cd")],
    )  # fmt: skip
    started(platform, operator, vm)
    assert wait_for(lambda: cd_label(platform, vm), "the CD's label", 30) == "ZOPDAY_TOOLS"
    cd = vm.disks.get(role=DiskRole.CDROM)

    if platform.name == "kubevirt":
        with pytest.raises(ActionRefused) as refused:
            storage.cdrom_insert(disk=cd, actor=operator, image=second)
        assert str(refused.value) == (
            "KubeVirt cannot change a CD-ROM's media while cd-vm runs: stop it, then change it."
        )
        assert Disk.objects.get(pk=cd.pk).image == first  # nothing half-made
        assert cd_label(platform, vm) == "ZOPDAY_TOOLS"
    else:
        storage.cdrom_insert(disk=cd, actor=operator, image=second)
        assert wait_for(lambda: cd_label(platform, vm) == "ZOPDAY_DRIVERS", "the new medium", 60)
        mount = "mount -t iso9660 -o ro /dev/sr0 /mnt && cat /mnt/label.txt; umount /mnt"
        assert run_in(platform, vm, mount) == "ZOPDAY_DRIVERS"
        storage.cdrom_eject(disk=cd, actor=operator)
        assert wait_for(lambda: cd_label(platform, vm) == "", "the medium out", 60) is True
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)

    storage.cdrom_insert(disk=cd, actor=operator, image=second)  # stopped: every platform can
    started(platform, operator, vm, boots=2)
    assert wait_for(lambda: cd_label(platform, vm), "the CD's label", 30) == "ZOPDAY_DRIVERS"
    if platform.name == "kubevirt":  # the first medium's DataVolume went with it
        store = request.getfixturevalue("kube_api").store
        media = [body for (resource, _, _), body in store.objects.items()
                 if resource.kind == "DataVolume" and "zopday.io/cdrom" in body["metadata"]["labels"]]  # fmt: skip
        assert len(media) == 1
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
