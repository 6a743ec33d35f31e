"""kill -9 of the host's worker in the middle of each operation: the instance settles to what
really runs on the host, a live QEMU is taken over, never two open one disk, and the work is
carried out once a fresh worker starts.

Each test runs its own host worker (a real Celery worker on a host queue of its own) with the
hold points of instances.holds on; the test names a point, waits until the work reaches it,
kills the worker there and starts a fresh one.
"""

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from instances.backends import backend_named
from instances.backends.base import BackendError, Power
from instances.backends.qemu import process
from instances.backends.qemu.agent import GuestAgent
from instances.backends.qemu.images import GIB, QemuImg
from instances.choices import LastExit, PowerState, SnapshotState
from instances.models import Disk, DiskSnapshot, Instance
from instances.services import power, snapshots, storage
from tests import factories
from tests.broker import BrokerQueue
from tests.factories import SubnetFactory
from tests.services import start_celery_worker_on, stop

T = TypeVar("T")

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SETTLE_TIMEOUT = 60  # a fresh worker's start, the work sent again, and a boot under TCG


class HostWorker:
    """The worker of one test host, started with hold points on; killed where the work holds."""

    def __init__(self, host: str, folder: Path) -> None:
        self.host, self.folder = host, folder
        self.started = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.started += 1
        log = self.folder / f"worker-{self.started}.log"
        env = {"ZOPDAY_HOST": self.host, "ZOPDAY_TEST_HOLD": str(self.folder)}
        self.process = start_celery_worker_on(log, f"host.{self.host}", env)

    def killed_at(self, point: str, act: Callable[[], T]) -> T:
        """act() (which queues work), then kill -9 once that work holds at point; a fresh
        worker, which holds nowhere, takes over. What act returned."""
        result = self.held_at(point, act)
        self.kill_and_start()
        return result

    def held_at(self, point: str, act: Callable[[], T]) -> T:
        """act(), and wait until its work holds at point (a worker started later holds nowhere)."""
        (self.folder / "held").unlink(missing_ok=True)
        (self.folder / "point").write_text(point)
        result = act()
        held = self.folder / "held"
        wait_for(lambda: held.exists() and held.read_text().startswith(point), f"work at {point}")
        (self.folder / "point").unlink()
        return result

    def kill_and_start(self) -> None:
        """kill -9 of the worker, and a fresh one."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.start()


@pytest.fixture
def worker(django_db_setup, machines_root, tmp_path):
    host_worker = HostWorker(f"kill-{uuid.uuid4().hex[:8]}", tmp_path)
    host_worker.start()
    yield host_worker
    if host_worker.process is not None:
        stop(host_worker.process)
    BrokerQueue(f"host.{host_worker.host}").forget()


@pytest.fixture
def backend(machines_root):
    return backend_named("qemu")


@pytest.fixture
def lan(project):
    return SubnetFactory(
        project=project, name="lan", cidr_v4="10.89.0.0/24", gateway="10.89.0.1", dns_resolvers=""
    )


@pytest.fixture
def vm(worker, operator, lan):
    """A demo guest on the test's host, stopped."""
    n = Instance.objects.count() + 10
    instance = factories.demo_instance(
        actor=operator,
        image=factories.demo_image(),
        subnet=lan,
        name=f"kill-{n}",
        ip=f"10.89.0.{n}",
    )
    Instance.objects.filter(pk=instance.pk).update(host=worker.host)
    Disk.objects.filter(instance=instance).update(host=worker.host)
    instance.refresh_from_db()
    return instance


def wait_for(predicate, what: str, timeout: float = SETTLE_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def settles(vm: Instance, state: str) -> Instance:
    def reached() -> bool:
        vm.refresh_from_db()
        return vm.power_state == state

    wait_for(reached, f"{vm.name} to be {state} (it is {vm.power_state}: {vm.power_message})")
    return vm


def qemus_of(backend, vm: Instance) -> list[int]:
    """Every live QEMU process of the instance's machine, whatever pid files say."""
    return process.find(str(backend.root / vm.machine_id / "qmp.sock"))


def assert_true_to_the_host(backend, vm: Instance) -> None:
    """The instance's state is what runs: one QEMU when running (the one the backend reports),
    none when stopped; and no disk of it is open in more than one process."""
    vm.refresh_from_db()
    qemus = qemus_of(backend, vm)
    status = backend.status(vm.machine_id)
    if vm.power_state == PowerState.RUNNING:
        assert len(qemus) == 1 and status.power == Power.RUNNING and status.pid == qemus[0]
    else:
        assert qemus == [] and status.power == Power.STOPPED
    for disk in vm.disks.exclude(role="cdrom"):
        path = backend.root / "disks" / f"{disk.device_name}.qcow2"
        assert len(process.holders([path], "qemu-system")) <= 1, disk.name


def guest_prompts(backend, vm: Instance) -> int:
    log = backend.serial_log(vm.machine_id)
    return log.read_bytes().count(f"root@{vm.name}:/# ".encode()) if log.exists() else 0


def run_in(backend, vm: Instance, script: str) -> str:
    code, output = backend.guest_exec(vm.machine_id, ["sh", "-c", script], timeout=30)
    assert code == 0, output
    return output.strip()


def booted(backend, vm: Instance, count: int = 1) -> None:
    wait_for(lambda: guest_prompts(backend, vm) >= count, f"prompt {count} of {vm.name}")


def start(backend, vm: Instance, operator) -> None:
    power.instance_start(instance=vm, actor=operator)
    settles(vm, PowerState.RUNNING)
    booted(backend, vm, guest_prompts(backend, vm) + 1)


def force_shutdown(backend, vm: Instance, operator) -> None:
    power.instance_force_stop(instance=vm, actor=operator)
    settles(vm, PowerState.STOPPED)
    assert_true_to_the_host(backend, vm)


@pytest.mark.parametrize(
    "point, link_up",
    [
        ("start.before-spawn", True),  # nothing launched yet: the start is carried out
        ("start.spawned", False),  # QEMU up, paused for its cable-out link, no pid recorded
        ("start.launched", True),  # QEMU running, its monitor answered; the database not told
    ],
)
def test_a_start_killed_midway_settles_to_the_qemu_that_runs_and_stops_and_starts_again(
    worker, backend, vm, operator, point, link_up
):
    if not link_up:
        vm.nics.update(link_desired="down")
    worker.killed_at(point, lambda: power.instance_start(instance=vm, actor=operator))

    settles(vm, PowerState.RUNNING)
    assert_true_to_the_host(backend, vm)
    booted(backend, vm)  # the guest runs: a QEMU left paused was let go
    assert run_in(backend, vm, "cat /sys/class/net/eth0/carrier") == ("1" if link_up else "0")
    force_shutdown(backend, vm, operator)
    start(backend, vm, operator)
    assert_true_to_the_host(backend, vm)
    force_shutdown(backend, vm, operator)


def test_a_shutdown_killed_after_the_press_settles_stopped_and_starts_again(
    worker, backend, vm, operator
):
    start(backend, vm, operator)
    worker.killed_at(
        "shutdown.pressed", lambda: power.instance_shutdown(instance=vm, actor=operator)
    )

    settles(vm, PowerState.STOPPED)
    assert vm.last_exit == LastExit.REQUESTED
    wait_for(lambda: not qemus_of(backend, vm), "the powered-off QEMU to be ended")
    assert_true_to_the_host(backend, vm)
    start(backend, vm, operator)
    assert_true_to_the_host(backend, vm)
    force_shutdown(backend, vm, operator)


def test_a_restart_and_a_force_shutdown_killed_midway_are_carried_out(
    worker, backend, vm, operator
):
    start(backend, vm, operator)
    worker.killed_at(
        "restart.before-reboot", lambda: power.instance_restart(instance=vm, actor=operator)
    )
    settles(vm, PowerState.RUNNING)
    booted(backend, vm, 2)  # the restart was sent again, and the guest rebooted
    assert_true_to_the_host(backend, vm)

    worker.killed_at(
        "force_stop.before-quit", lambda: power.instance_force_stop(instance=vm, actor=operator)
    )
    settles(vm, PowerState.STOPPED)
    assert vm.last_exit == LastExit.REQUESTED
    assert_true_to_the_host(backend, vm)


def reboots_asked(backend, vm: Instance) -> int:
    """The reboots the guest's agent carried out: the demo guest's /sbin/shutdown says each."""
    return backend.serial_log(vm.machine_id).read_bytes().count(b"zopday-demo: shutdown: reboot")


def agent_answers(backend, vm: Instance) -> bool:
    """One guest-exec answered. The agent takes commands in order: any reboot asked before
    has run by then (or the guest went down, and this asks the next boot's agent)."""
    try:
        return run_in(backend, vm, "echo up") == "up"
    except (BackendError, AssertionError):
        return False


def test_a_restart_whose_worker_died_after_the_reboot_was_sent_reboots_the_guest_once(
    worker, backend, vm, operator
):
    start(backend, vm, operator)
    worker.held_at("restart.sent", lambda: power.instance_restart(instance=vm, actor=operator))
    booted(backend, vm, 2)  # the guest rebooted; its worker never finished the task
    wait_for(lambda: agent_answers(backend, vm), "the guest agent after the reboot")
    worker.kill_and_start()  # the restart is sent again

    settles(vm, PowerState.RUNNING)
    wait_for(lambda: agent_answers(backend, vm), "the guest agent after the restart")
    assert reboots_asked(backend, vm) == 1
    assert guest_prompts(backend, vm) == 2
    assert_true_to_the_host(backend, vm)
    force_shutdown(backend, vm, operator)


def test_a_snapshot_killed_midway_ends_taken_with_the_guest_thawed(worker, backend, vm, operator):
    start(backend, vm, operator)
    root = vm.disks.get(role="root")
    path = backend.root / "disks" / f"{root.device_name}.qcow2"
    agent = GuestAgent(backend.root / vm.machine_id / "qga.sock")
    for name, point in (("frozen", "snapshot.frozen"), ("taken", "snapshot.taken")):
        snapshot = worker.killed_at(
            point, lambda n=name: snapshots.disk_snapshot(disk=root, actor=operator, name=n)
        )
        wait_for(
            lambda s=snapshot: DiskSnapshot.objects.get(pk=s.pk).state != SnapshotState.TAKING,
            f"snapshot {name} to be settled",
        )
        snapshot.refresh_from_db()
        assert (snapshot.state, snapshot.message) == (SnapshotState.READY, ""), name
        assert name in QemuImg().snapshots(path)
        assert agent.freeze_status() == "thawed"
    assert run_in(backend, vm, "echo written > /data/after && cat /data/after") == "written"
    assert_true_to_the_host(backend, vm)
    force_shutdown(backend, vm, operator)


def test_a_snapshot_whose_retry_waits_when_its_worker_dies_is_taken_by_the_next(
    worker, backend, vm, operator
):
    root = vm.disks.get(role="root")
    (worker.folder / "fail").write_text("snapshot.take")  # one busy-monitor error: a retry waits
    snapshot = snapshots.disk_snapshot(disk=root, actor=operator, name="retried")
    log = worker.folder / f"worker-{worker.started}.log"
    wait_for(
        lambda: log.read_text().count("instances.disk_snapshot[") >= 3,  # received, retry, received
        "the retry to wait in the worker",
    )
    assert "retry: Retry in" in log.read_text()
    worker.kill_and_start()

    wait_for(
        lambda: DiskSnapshot.objects.get(pk=snapshot.pk).state != SnapshotState.TAKING,
        "the snapshot to be taken",
    )
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.message) == (SnapshotState.READY, "")
    assert "retried" in QemuImg().snapshots(backend.root / "disks" / f"{root.device_name}.qcow2")


def test_a_disk_hotplug_and_a_resize_killed_midway_are_carried_out(worker, backend, vm, operator):
    start(backend, vm, operator)
    disk = worker.killed_at(
        "hotplug.block-added",
        lambda: storage.disk_add(
            instance=vm, actor=operator, name="extra", size_gb=1, bus="virtio"
        ),
    )
    find = 'for d in /sys/block/vd*; do [ "$(cat $d/serial)" = extra ] && basename $d; done; true'
    name = wait_for(lambda: run_in(backend, vm, find), "the disk in the guest")

    worker.killed_at(
        "resize.before-resize", lambda: storage.disk_resize(disk=disk, actor=operator, size_gb=2)
    )
    wait_for(
        lambda: run_in(backend, vm, f"cat /sys/block/{name}/size") == str(2 * GIB // 512),
        "the guest to see the disk grown",
    )
    assert_true_to_the_host(backend, vm)
    force_shutdown(backend, vm, operator)
