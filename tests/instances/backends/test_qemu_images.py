"""Images as the QEMU backend opens them: with their format named, probed before a disk is made
over them, and with no backing chain beyond the one the console made. Decoy files only."""

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from instances.backends.base import BackendError, DiskSpec, MachineSpec
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.cmdline import qcow2_node
from tests.instances.image_files import decoy, iso, polyglot, qcow2

MACHINE = MachineSpec("i-7", "web-7", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=256)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="zq"))
    yield path
    shutil.rmtree(path)


def machine_with(*disks: DiskSpec) -> MachineSpec:
    return MachineSpec(**{**MACHINE.__dict__, "disks": disks})


def test_no_disk_is_made_over_an_image_whose_file_was_swapped_for_a_backed_qcow2(short_dir):
    image = qcow2(short_dir, "7.qcow2", size="64M")  # registered as a sound qcow2
    polyglot(short_dir, "attack").replace(image)  # then swapped
    backend = QemuBackend(short_dir / "runs", network_mode="user")
    root = DiskSpec("disk-1", "root", "virtio", size_gb=1, source=image)
    with pytest.raises(BackendError, match="it names a backing file"):
        backend.define(machine_with(root))
    with pytest.raises(BackendError, match="it names a backing file"):
        backend.attach_disk(MACHINE, root)
    assert not (short_dir / "runs" / "disks" / "disk-1.qcow2").exists()


def test_an_iso_image_is_no_disks_backing_file(short_dir):
    backend = QemuBackend(short_dir / "runs", network_mode="user")
    root = DiskSpec("disk-1", "root", "virtio", size_gb=1, source=iso(short_dir))
    with pytest.raises(BackendError, match="it is a raw disk or ISO image, not a"):
        backend.define(machine_with(root))


def test_a_cdrom_whose_iso_is_also_a_qcow2_is_refused(short_dir):
    backend = QemuBackend(short_dir / "runs", network_mode="user")
    cdrom = DiskSpec("cd-1", "cdrom", "sata", source=polyglot(short_dir))
    with pytest.raises(BackendError, match="it is a qcow2 image, not a raw"):
        backend.define(machine_with(cdrom))


def test_a_disk_is_not_started_once_its_image_was_swapped_after_the_disk_was_made(short_dir):
    image = qcow2(short_dir, "7.qcow2", size="64M")
    backend = QemuBackend(short_dir / "runs", network_mode="user")
    root = DiskSpec("disk-1", "root", "virtio", size_gb=1, source=image)
    backend.define(machine_with(root))  # the disk is made over the sound image
    polyglot(short_dir, "attack").replace(image)
    with pytest.raises(BackendError, match="it names a backing file"):
        backend.define(machine_with(root))


def test_a_disk_whose_file_names_another_backing_file_is_not_started(short_dir):
    backend = QemuBackend(short_dir / "runs", network_mode="user")
    disk = short_dir / "runs" / "disks" / "disk-1.qcow2"
    disk.parent.mkdir(parents=True)
    qcow2(disk.parent, disk.name, size="1M", backing=decoy(short_dir))
    plain = DiskSpec("disk-1", "root", "virtio", size_gb=1)
    with pytest.raises(BackendError, match="names a file the console did not make it over"):
        backend.define(machine_with(plain))


def test_qemu_opens_a_disk_with_the_chain_the_console_made_whatever_its_headers_name(
    short_dir,
):
    """QEMU itself, with no machine: the disk's block node as the command line gives it."""
    secret = decoy(short_dir)
    image = qcow2(short_dir, "7.qcow2", size="1M")
    disk = short_dir / "disk-1.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(polyglot(short_dir)),
                    "-F", "qcow2", str(disk)], check=True)  # fmt: skip
    node = qcow2_node(DiskSpec("disk-1", "root", "virtio", 1, source=image), disk)
    commands = [{"execute": "qmp_capabilities"}, {"execute": "query-named-block-nodes"},
                {"execute": "quit"}]  # fmt: skip
    answer = subprocess.run(
        ["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
         "-qmp", "stdio", "-blockdev", json.dumps(node)],
        input="".join(json.dumps(command) + "\n" for command in commands),
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    opened = [
        node["file"]
        for line in answer.stdout.splitlines()
        if isinstance(reply := json.loads(line).get("return"), list)
        for node in reply
    ]
    assert str(disk) in opened and str(image) in opened
    assert not [name for name in opened if str(secret) in name or "polyglot" in name]


def test_every_qemu_img_call_on_a_disk_names_its_format(short_dir):
    log = short_dir / "argv.log"
    wrapper = short_dir / "qemu-img"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec qemu-img "$@"\n')
    wrapper.chmod(0o755)
    backend = QemuBackend(short_dir / "runs", network_mode="user", qemu_img=str(wrapper))
    image = qcow2(short_dir, "7.qcow2", size="64M")
    root = DiskSpec("disk-1", "root", "virtio", size_gb=1, source=image)
    backend.define(machine_with(root))
    backend.resize_disk(MACHINE, DiskSpec("disk-1", "root", "virtio", size_gb=2, source=image))
    backend.snapshot_disks("i-7", [root], "first")
    backend.revert_snapshot("i-7", "disk-1", "first")
    backend.delete_snapshot("i-7", "disk-1", "first")
    calls = log.read_text().splitlines()
    assert f"info -U --output=json -f qcow2 {image}" in calls  # the image, its header read first
    assert len(calls) >= 9
    for call in calls:
        assert " -f qcow2 " in f" {call} " or "driver=qcow2," in call, call
