"""Instances driven through the services and a real Celery worker, on each platform: this
console's QEMU hosts and a KubeVirt cluster (the fake, whose VMIs are real QEMU guests).

Every test boots the demo guest under TCG; they share one worker and one private network
namespace (see the machines_root fixture).
"""

import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from instances.backends import backend_named
from instances.backends.base import MachineStatus
from instances.choices import CarrierState, DiskRole, ImageKind, LastExit, PowerState, RunStrategy
from instances.models import AuditEvent, GuestReport, Instance
from instances.services import guest_reports, machines, network, power
from instances.services.instances import DiskRequest, NicRequest, instance_create
from instances.tasks import guest_reports_all, reconcile_host
from tests import factories
from tests.factories import ImageFactory
from tests.instances.agent import agent_facts
from tests.instances.boot_iso import write_boot_iso
from tests.instances.platforms import Platform

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BOOT_TIMEOUT = 90


@pytest.fixture
def demo_image():
    return factories.demo_image()


@pytest.fixture
def lan(platform, project):
    return platform.lan(project)


def wait_for(predicate, what: str, timeout: float = BOOT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)
    return result


def wait_for_state(instance: Instance, state: str, timeout: float = BOOT_TIMEOUT) -> Instance:
    def reached():
        instance.refresh_from_db()
        return instance.power_state == state

    wait_for(
        reached,
        f"{instance.name} to be {state} (it is {instance.power_state}: {instance.power_message})",
        timeout,
    )
    return instance


def guest_status(platform: Platform, instance: Instance) -> MachineStatus:
    node, machine = platform.guest(instance)
    return node.status(machine)


def wait_for_prompt(platform: Platform, instance: Instance, count: int = 1) -> None:
    node, machine = platform.guest(instance)
    log = node.serial_log(machine)
    prompt = f"root@{instance.name}:/# ".encode()
    wait_for(
        lambda: log.exists() and log.read_bytes().count(prompt) >= count,
        f"the prompt of {instance.name}",
    )


def run_in(platform: Platform, instance: Instance, script: str) -> str:
    """What a command prints in the instance's guest, asked through its QEMU guest agent."""
    node, machine = platform.guest(instance)
    code, output = node.guest_exec(machine, ["sh", "-c", script], timeout=30)
    assert code == 0, output
    return output.strip()


def test_start_applies_the_seed_and_acpi_shutdown_powers_the_guest_off(
    platform, project, operator, demo_image, lan, client_for
):
    vm = platform.make(operator, demo_image, lan, "seeded-vm", "10.88.0.10")
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    assert run_in(platform, vm, "hostname") == "seeded-vm"
    assert "10.88.0.10/24" in run_in(platform, vm, "ip -4 addr show eth0")
    resolv = run_in(platform, vm, "cat /etc/resolv.conf")  # lan names none: the default ones
    assert "nameserver 1.1.1.1" in resolv and "nameserver 9.9.9.9" in resolv
    # asked as the console asks (on KubeVirt the VMI says when the agent connected)
    # the agent may have answered before the guest's network was up: wait for an answer after
    wait_for(
        lambda: any(
            "10.88.0.10/24" in iface.addresses
            for iface in agent_facts(backend_named(vm.backend), vm.machine_id).interfaces
        ),
        "the agent's report of 10.88.0.10/24",
        30,
    )
    assert vm.nics.get().carrier == CarrierState.UP
    guest_reports_all()  # the periodic ask, through the host's worker
    # the row is made when the host asks, and filled in when the agent answers
    answered = GuestReport.objects.filter(instance=vm).exclude(reported_at=None, error="")
    report = wait_for(answered.first, "a guest report")
    assert report.hostname == "seeded-vm", report.error
    overview = client_for("viewer").get(f"/projects/alpha/instances/{vm.pk}/").content.decode()
    assert "10.88.0.10/24" in overview
    if platform.name == "qemu":  # KubeVirt's API relays no memory figures from the agent
        assert report.memory_total_kb > 0 and "Memory: " in overview

    power.instance_shutdown(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    assert vm.last_exit == LastExit.REQUESTED
    assert vm.nics.get().carrier == CarrierState.STOPPED
    wait_for(
        lambda: guest_status(platform, vm).power != "running", "QEMU to end after the power-off"
    )


def test_restart_reboots_the_guest_and_force_shutdown_kills_it(
    platform, project, operator, demo_image, lan
):
    vm = platform.make(operator, demo_image, lan, "restart-vm", "10.88.0.11")
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    assert run_in(platform, vm, "cat /data/boot-count") == "1"

    power.instance_restart(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm, count=platform.runs_in_log(2))
    assert run_in(platform, vm, "cat /data/boot-count") == "2"

    pid = guest_status(platform, vm).pid
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=30)
    assert guest_status(platform, vm).power != "running"
    assert (
        not os.path.exists(f"/proc/{pid}/cmdline") or not Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    assert vm.last_exit == LastExit.REQUESTED


def test_a_guest_that_ignores_acpi_keeps_running_unless_halted_cuts_its_power(
    platform, project, operator, demo_image, lan, monkeypatch
):
    """On KubeVirt a stop cannot be withdrawn: its grace period ends in a power cut."""
    vm = platform.make(operator, demo_image, lan, "deaf-vm", "10.88.0.13")
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    run_in(platform, vm, "killall acpid")  # the power button now does nothing
    monkeypatch.setattr(machines, "SHUTDOWN_TIMEOUT", 3)
    monkeypatch.setattr(machines, "ACPI_REPEAT_SECONDS", 1)

    def shut_down() -> None:
        """What the worker does for a Shutdown, here with a timeout of 3 s."""
        claimed_at = timezone.now()
        Instance.objects.filter(pk=vm.pk).update(
            power_state=PowerState.STOPPING, state_changed_at=claimed_at
        )
        machines.machine_shutdown(vm.pk, claimed_at.isoformat())
        vm.refresh_from_db()

    shut_down()
    if platform.name == "kubevirt":  # KubeVirt's stop is final: its grace period, then the cut
        assert (vm.power_state, vm.power_message) == (
            PowerState.STOPPED,
            "The guest did not power off within 3 s of the ACPI signal; its power was cut at "
            "the end of the grace period.",
        )
        assert guest_status(platform, vm).power != "running"
        return
    assert (vm.power_state, vm.power_message) == (
        PowerState.RUNNING,
        "The guest did not power off within 3 s of the ACPI signal. Use Force Shutdown if it "
        "is unresponsive.",
    )
    assert guest_status(platform, vm).power == "running"
    Instance.objects.filter(pk=vm.pk).update(run_strategy=RunStrategy.HALTED)
    shut_down()
    assert (vm.power_state, vm.power_message) == (
        PowerState.STOPPED,
        "The guest did not power off within 3 s of the ACPI signal; the Halted run strategy "
        "cut its power.",
    )
    assert guest_status(platform, vm).power != "running"


def test_link_down_changes_the_carrier_the_guest_reports(
    platform, project, operator, demo_image, lan
):
    vm = platform.make(operator, demo_image, lan, "link-vm", "10.88.0.12")
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    assert run_in(platform, vm, "cat /sys/class/net/eth0/carrier") == "1"
    eth0 = vm.nics.get()
    network.nic_set_link(nic=eth0, actor=operator, up=False, confirm_primary=True)
    wait_for(
        lambda: run_in(platform, vm, "cat /sys/class/net/eth0/carrier") == "0", "carrier down", 30
    )
    # the row is written once the backend has seen the link change, a moment after the guest
    wait_for(lambda: carrier_of(eth0) == CarrierState.DOWN, "the carrier row down", 30)
    # the guest's driver says so too, once the agent's next answer is in
    wait_for(lambda: carriers_reported(vm) == {eth0.mac: False}, "the agent's carrier down", 30)
    network.nic_set_link(nic=eth0, actor=operator, up=True)
    wait_for(
        lambda: run_in(platform, vm, "cat /sys/class/net/eth0/carrier") == "1", "carrier up", 30
    )
    wait_for(lambda: carriers_reported(vm) == {eth0.mac: True}, "the agent's carrier up", 30)
    reconcile_host(vm.host)
    wait_for(lambda: carrier_of(eth0) == CarrierState.UP, "the carrier row up", 30)


def carrier_of(nic) -> str:
    nic.refresh_from_db(fields=["carrier"])
    return nic.carrier


def carriers_reported(vm: Instance) -> dict[str, bool | None]:
    """MAC -> carrier, as the guest agent reports them now."""
    report = guest_reports.guest_report(vm)
    assert report.error == ""
    return {interface["mac"]: interface["carrier"] for interface in report.interfaces}


def test_two_instances_on_one_subnet_ping_each_other(platform, project, operator, demo_image, lan):
    a = platform.make(operator, demo_image, lan, "ping-a", "10.88.0.21")
    b = platform.make(operator, demo_image, lan, "ping-b", "10.88.0.22")
    for vm in (a, b):
        power.instance_start(instance=vm, actor=operator)
    for vm in (a, b):
        wait_for_state(vm, PowerState.RUNNING)
        wait_for_prompt(platform, vm)
    assert "0% packet loss" in run_in(platform, a, "ping -c 3 -W 2 10.88.0.22")
    assert "0% packet loss" in run_in(platform, b, "ping -c 3 -W 2 10.88.0.21")


def test_run_strategies_decide_what_happens_after_a_crash_or_a_guest_poweroff(
    platform, project, operator, demo_image, lan
):
    """kill -9 of QEMU, or a kernel panic in the guest, is restarted under Always and
    RerunOnFailure, not under Once or Manual; a clean power-off from inside the guest is
    restarted only under Always."""
    cases = {
        "always-crash": (RunStrategy.ALWAYS, "kill", True),
        "rerun-crash": (RunStrategy.RERUN_ON_FAILURE, "kill", True),
        "once-crash": (RunStrategy.ONCE, "kill", False),
        "manual-crash": (RunStrategy.MANUAL, "kill", False),
        "always-off": (RunStrategy.ALWAYS, "poweroff", True),
        "rerun-off": (RunStrategy.RERUN_ON_FAILURE, "poweroff", False),
        "rerun-panic": (RunStrategy.RERUN_ON_FAILURE, "panic", True),
    }
    vms = {}
    for n, (name, (strategy, _, _)) in enumerate(cases.items()):
        vms[name] = platform.make(
            operator, demo_image, lan, name, f"10.88.0.{40 + n}", run_strategy=strategy
        )
        if strategy == RunStrategy.MANUAL:
            power.instance_start(instance=vms[name], actor=operator)
    for vm in vms.values():
        wait_for_state(vm, PowerState.RUNNING)
        wait_for_prompt(platform, vm)
    for name, (_, how, _) in cases.items():
        vm = vms[name]
        if how == "kill":
            pid = wait_for(lambda vm=vm: guest_status(platform, vm).pid, f"the QEMU of {name}")
            os.kill(pid, signal.SIGKILL)
        else:
            command = "poweroff" if how == "poweroff" else "echo c > /proc/sysrq-trigger"
            run_in(platform, vm, f"(sleep 0.5; {command}) >/dev/null 2>&1 &")
    if platform.name == "qemu":  # the host's reconciler reads them; on KubeVirt, the watches
        wait_for(
            lambda: not any(guest_status(platform, vm).power == "running" for vm in vms.values()),
            "every guest to stop",
            30,
        )
        reconcile_host.apply_async(args=[settings.ZOPDAY_HOST], ignore_result=False).get(60)

    for name, (_, how, restarted) in cases.items():
        vm = vms[name]
        vm.refresh_from_db()
        if restarted:
            wait_for(
                lambda pk=vm.pk: Instance.objects.filter(pk=pk, auto_restarts=1).exists(), name
            )
            wait_for_state(vm, PowerState.RUNNING)
            event = AuditEvent.objects.get(action="instance.auto_restart", target_id=str(vm.pk))
            seen = LastExit.GUEST_POWEROFF if how == "poweroff" else LastExit.CRASHED
            assert event.message == f"{seen.label}; run strategy {vm.run_strategy}.", name
        else:
            wait_for_state(vm, PowerState.STOPPED, timeout=30)
            assert vm.last_exit == (
                LastExit.CRASHED if how == "kill" else LastExit.GUEST_POWEROFF
            ), name
    wait_for_prompt(platform, vms["always-crash"], count=platform.runs_in_log(2))


def test_a_blank_root_disk_boots_the_cdrom_to_install_from(
    platform, project, operator, lan, tmp_path
):
    iso = ImageFactory(
        kind=ImageKind.ISO, name="installer",
        path=str(write_boot_iso(tmp_path / "installer.iso", "ZOPDAY-INSTALLER-BOOTED")),
    )  # fmt: skip
    request = factories.instance_request(
        lan, root_image=None, name="install-vm", nics=[NicRequest(lan, ipv4="10.88.0.30")],
        **({"cluster": platform.cluster} if platform.cluster else {}),
        disks=[DiskRequest(size_gb=0, role=DiskRole.CDROM, image=iso)],
    )  # fmt: skip
    vm = instance_create(project=project, actor=operator, request=request)
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    node, machine = platform.guest(vm)
    log = node.serial_log(machine)
    wait_for(  # the firmware passed over the empty root disk to the CD's boot code
        lambda: log.exists() and b"ZOPDAY-INSTALLER-BOOTED" in log.read_bytes(),
        "the installer CD to boot",
        timeout=60,
    )
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=30)


def test_a_once_instance_that_ended_runs_again_when_started(
    platform, project, operator, demo_image, lan
):
    """Once runs the guest one time by itself; a start asked for later runs it once more
    (on KubeVirt, whose start subresource refuses Once, by replacing the finished VMI)."""
    vm = platform.make(
        operator, demo_image, lan, "once-again", "10.88.0.60", run_strategy=RunStrategy.ONCE
    )
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm)
    run_in(platform, vm, "(sleep 0.5; poweroff) >/dev/null 2>&1 &")
    if platform.name == "qemu":
        wait_for(lambda: guest_status(platform, vm).power != "running", "the power-off", 60)
        reconcile_host.apply_async(args=[settings.ZOPDAY_HOST], ignore_result=False).get(60)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    assert vm.last_exit == LastExit.GUEST_POWEROFF and vm.auto_restarts == 0

    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.RUNNING)
    wait_for_prompt(platform, vm, count=platform.runs_in_log(2))
    assert run_in(platform, vm, "hostname") == "once-again"
