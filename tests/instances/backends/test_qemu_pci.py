"""The most virtio disks and interfaces the services let an instance have is what a real QEMU
machine holds, and one more is not."""

import subprocess
import time
from pathlib import Path

import pytest

from instances.backends.base import MAX_PCI_DEVICES, CloudInitSeed, DiskSpec, MachineSpec, NicSpec
from instances.backends.qemu.cmdline import LaunchOptions, build_argv
from instances.backends.qemu.run_folder import RunFolder, disk_store


def launch(root: Path, *, disks: int, nics: int) -> subprocess.CompletedProcess | None:
    """Start QEMU paused on that many virtio disks and interfaces: None while it runs (then
    ended), else its exit with the reason."""
    run = RunFolder(root / "i-1")
    run.path.mkdir(parents=True)
    disk_store(root).mkdir()
    specs = tuple(DiskSpec(f"disk-{n}", "secondary", "virtio") for n in range(disks))
    for spec in specs:
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", str(run.disk_path(spec.name)), "1M"],
            check=True,
        )
    run.seed_iso.write_bytes(b"\0" * 2048)
    machine = MachineSpec(
        id="i-1", name="pci", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=128,
        disks=specs, seed=CloudInitSeed(meta_data="", user_data=""),
        nics=tuple(NicSpec(f"eth{n}", f"52:54:00:00:01:{n:02x}", "virtio") for n in range(nics)),
    )  # fmt: skip
    argv = [a for a in build_argv(machine, run, LaunchOptions(paused=True)) if a != "-daemonize"]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    if process.poll() is None:
        process.kill()
        process.wait()
        return None
    return subprocess.CompletedProcess(argv, process.returncode, "", process.stderr.read())


@pytest.fixture
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pci", numbered=True)


def test_the_most_virtio_disks_and_interfaces_allowed_fit_on_the_machine(root):
    assert launch(root, disks=MAX_PCI_DEVICES - 1, nics=1) is None


def test_one_more_does_not(root):
    ended = launch(root, disks=MAX_PCI_DEVICES, nics=1)
    assert ended is not None and "no slot/function available" in ended.stderr
