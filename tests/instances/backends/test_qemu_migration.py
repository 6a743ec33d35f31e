"""Live migration between two QEMU backends sharing one disk folder, against the demo guest:
the guest keeps running through it, on the target, without booting again."""

import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from instances.backends.base import CloudInitSeed, DiskSpec, MachineSpec, NicSpec, Power
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.migration import MigrationProgress

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
IMAGE = REPO / "var" / "images" / "demo"
BOOT_TIMEOUT = 180
SPEC = MachineSpec(
    "mover", "mover", 1, 1, 1, 1, 256,
    disks=(DiskSpec("mover-root", "root", "virtio", 1, boot_order=1),),
    nics=(NicSpec("eth0", "02:00:00:00:00:07", "virtio"),),
    seed=CloudInitSeed("local-hostname: mover\n", "#cloud-config\n"),
    kernel=Path("vmlinuz"), initrd=Path("initrd.img"), kernel_cmdline="console=ttyS0",
)  # fmt: skip
UPTIME = re.compile(rb"up=(\d+\.\d+)")


@pytest.fixture
def hosts() -> Iterator[tuple[QemuBackend, QemuBackend]]:
    """Two backends, as two hosts whose disk folder is one shared store."""
    if not (IMAGE / "vmlinuz").is_file():
        pytest.fail("the demo image is not built (bin/zop test builds it)")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="zm"))
    (root / "disks").mkdir()
    for host in ("a", "b"):
        (root / host).mkdir()
        (root / host / "disks").symlink_to(root / "disks")
    pair = tuple(QemuBackend(root / host, images=IMAGE, network_mode="user") for host in "ab")
    yield pair  # type: ignore[misc]
    for backend in pair:
        for machine_id in backend.running_machines():
            backend.force_stop(machine_id)
    shutil.rmtree(root, ignore_errors=True)


def wait_for(condition, what: str, timeout: float = BOOT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.2)
    return result


def uptime(backend: QemuBackend) -> float:
    """The guest's uptime, asked on its serial console and read back from its serial log."""
    log = backend.serial_log(SPEC.id)
    seen = len(UPTIME.findall(log.read_bytes())) if log.exists() else 0
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(backend.console_socket(SPEC.id, "serial")))
        console.sendall(b"echo up=$(cut -d' ' -f1 /proc/uptime)\n")
        time.sleep(0.3)  # the UART drains before the socket closes
    found = wait_for(
        lambda: (values := UPTIME.findall(log.read_bytes())) and len(values) > seen and values,
        "the uptime on the serial console",
        timeout=60,
    )
    return float(found[-1])


def test_the_guest_runs_on_at_the_target_without_booting_again(hosts):
    source, target = hosts
    source.start(SPEC)
    wait_for(lambda: b"root@mover:/# " in source.serial_log(SPEC.id).read_bytes(), "at the prompt")
    before = uptime(source)
    seen: list[MigrationProgress] = []

    progress = source.migrate_to(target, SPEC, timeout=120, on_progress=seen.append)

    assert progress.status == "completed", progress.error
    assert seen[-1].percent == 100
    assert source.status(SPEC.id).power is Power.STOPPED
    assert target.status(SPEC.id).power is Power.RUNNING
    assert uptime(target) > before  # the same guest, its clock running on
    assert b"Linux version" not in target.serial_log(SPEC.id).read_bytes()  # no new boot


def test_a_failed_migration_leaves_the_guest_running_at_the_source(hosts):
    source, target = hosts
    source.start(SPEC)
    wait_for(lambda: b"root@mover:/# " in source.serial_log(SPEC.id).read_bytes(), "at the prompt")
    address = target.migration_receive(SPEC)
    target.migration_abandon(SPEC.id)  # the target goes away before the source sends

    source.migration_send(SPEC.id, address)
    progress = wait_for(
        lambda: (read := source.migration_progress(SPEC.id)).finished and read, "failed", 60
    )

    assert progress.status == "failed"
    assert source.status(SPEC.id).power is Power.RUNNING
    assert target.status(SPEC.id).power is Power.STOPPED
    assert uptime(source) > 0
