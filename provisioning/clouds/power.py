"""What the compute backends of provisioned cloud VMs share: power through the cloud's API.

An instance registered by stepRegisterSpace has the job's cloud as its backend ("aws", "gcp");
its machine id is the console's ("i-<instance pk>"). A backend finds the job VM registered as
that instance (selectors.job_vm_for_instance) and calls the cloud with the job's account, so
the SDKs stay inside the cloud packages. Each cloud subclass says how to read its VMs
(`describe`, in EC2's words for states) and how to start, stop and reboot one.

Start and force stop return once the cloud reports the VM running or stopped, like QEMU's;
shutdown asks the cloud to stop and wait_powered_off polls until it has. After each operation
the VM's lifecycle state in the job's InfraConfig is recorded (services.vm_states). Disks,
interfaces and consoles of these VMs are not the console's: those calls answer with a
BackendError that says so.
"""

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.urls import reverse

from instances.backends.base import (
    BackendError,
    ConsoleEndpoint,
    DiskSpec,
    ExitKind,
    GuestFacts,
    MachineFact,
    MachineSpec,
    MachineStatus,
    Power,
)
from provisioning.choices import JobStatus, VmState
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.selectors import JobVm, job_vm_for_instance
from provisioning.vm_states import (
    GONE_STATES,
    job_vm_states_record,
    lifecycle_for,
    stop_refusal,
    vm_gone,
)

# Clouds settle in seconds; the local fakes at once. A read every half second is cheap either way.
POLL_SECONDS = 0.5
# How long start and force stop wait in all for the cloud to report the VM running or stopped:
# within a Celery task's soft time limit.
SETTLE_SECONDS = 300
# States (EC2's words) in which the VM is not (yet) off.
ON_STATES = frozenset({"pending", "running", "stopping"})


@dataclass(frozen=True)
class CloudVm:
    """One VM as its cloud reports it, the state in EC2's words."""

    instance_id: str
    state: str  # pending | running | stopping | stopped | shutting-down | terminated
    exit_kind: ExitKind = ExitKind.NONE  # why it is not running, where the cloud says
    reason: str = ""  # the cloud's own words for the state, if any
    private_ip: str = ""


class CloudVmBackend:
    """Start, stop, reboot and status of provisioned VMs; nothing else."""

    name = ""
    service = ""  # the cloud's compute service: "EC2", "GCE"
    identity = ""  # whose identity the exec channel checks: "AWS", "Google"
    exec_channel = ""  # "SSM", "OS Login"
    console_kinds: frozenset[str] = frozenset()  # at most "exec": the cloud's IAM-gated channel
    keeps_serial_log = False
    stop_cuts_power = False

    @property
    def cloud(self) -> str:
        """How messages name one of the cloud's VMs: "EC2 instance"."""
        return f"{self.service} instance"

    # ---- what each cloud says -----------------------------------------------------------------
    @classmethod
    def describe(
        cls, account: CloudAccount, region: str, vms: list[VmRecord]
    ) -> dict[str, CloudVm]:
        """The VMs the cloud still knows, by id; one it has forgotten is simply absent. `vms`
        may be those of many jobs of the account and region (the periodic refresh batches)."""
        raise NotImplementedError

    def _power(self, target: JobVm, operation: str) -> None:
        """Ask the cloud to "start", "stop", "force_stop" or "reboot" the VM."""
        raise NotImplementedError

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """The cloud SDK's exceptions as CloudError (the provider's mapping)."""
        raise NotImplementedError
        yield

    def _vm_gone(self, error: CloudError) -> bool:
        """Whether the error says the cloud no longer knows the VM."""
        raise NotImplementedError

    @classmethod
    def lb_health(cls, job: ProvisioningJob, config: InfraConfig) -> dict[str, tuple[str, str]]:
        """What the job's load balancer says of each VM: cloud id → (state, why). CloudError
        when the cloud does not answer."""
        raise NotImplementedError

    @classmethod
    def exec_command(cls, job: ProvisioningJob, vm: VmRecord) -> str:
        """The exec channel's command, for a shell from the user's own terminal as their own
        cloud identity (beside the console's Exec, which opens it with the job's account)."""
        raise NotImplementedError

    @classmethod
    def gone_message(cls, job: ProvisioningJob, instance_id: str, vm: CloudVm | None) -> str:
        """What an instance says when its VM was deleted outside the console."""
        if vm is None:
            what = f"{cls.service} has no instance {instance_id} in {job.region} any more"
        else:
            what = f"{cls.service} instance {instance_id} is {vm.state}"
            if vm.reason:
                what += f" ({vm.reason})"
        return (
            f"{what}: it was terminated outside the console and cannot run again. Delete job "
            f"{job.name} to tear the rest of its environment down."
        )

    # ---- finding the VM ---------------------------------------------------------------------
    def _find(self, machine_id: str) -> JobVm | None:
        prefix, _, number = machine_id.partition("-")
        return job_vm_for_instance(int(number)) if prefix == "i" and number.isdigit() else None

    def _job_vm(self, machine_id: str) -> JobVm:
        found = self._find(machine_id)
        if found is None:
            raise BackendError(
                f"Instance {machine_id} is not a VM of any provisioning job: there is no "
                f"{self.cloud} to power on or off."
            )
        if found.job.status == JobStatus.TEARING_DOWN:
            raise BackendError(
                f"Job {found.job.name} is tearing its environment down: its VMs are being "
                "terminated."
            )
        return found

    @contextmanager
    def _errors(self, target: JobVm) -> Iterator[None]:
        """SDK errors → CloudError → BackendError with the cloud's own message; a VM the cloud
        no longer knows gets the message that says what happened."""
        try:
            with self._mapped():
                yield
        except CloudError as error:
            if self._vm_gone(error):
                self._gone(target, None)
                raise BackendError(
                    self.gone_message(target.job, target.vm.instance_id, None)
                ) from error
            raise BackendError(error.message, retryable=error.retryable) from error

    def _call(self, target: JobVm, operation: str) -> None:
        with self._errors(target):
            self._power(target, operation)

    def _describe(self, target: JobVm) -> CloudVm | None:
        try:
            found = self.describe(target.job.account, target.job.region, [target.vm])
        except CloudError as error:
            raise BackendError(error.message, retryable=error.retryable) from error
        return found.get(target.vm.instance_id)

    def _usable(self, target: JobVm) -> CloudVm:
        """The VM as the cloud reports it now; one that is gone is an error that says so."""
        vm = self._describe(target)
        if vm is None or vm.state in GONE_STATES:
            self._gone(target, vm)
            raise BackendError(self.gone_message(target.job, target.vm.instance_id, vm))
        return vm

    def _reach(self, target: JobVm, state: str, timeout: float, failure: str) -> CloudVm:
        """_wait_for one state; past the timeout, a retryable BackendError saying `failure`."""
        vm = self._wait_for(target, frozenset({state}), timeout)
        if vm is None:
            raise BackendError(f"{self.cloud} {target.vm.instance_id} {failure}", retryable=True)
        return vm

    def _wait_for(self, target: JobVm, states: frozenset[str], timeout: float) -> CloudVm | None:
        """Poll until the cloud reports one of `states`; None when the timeout passes first."""
        deadline = time.monotonic() + timeout
        while True:
            vm = self._usable(target)
            if vm.state in states:
                return vm
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(POLL_SECONDS, remaining))

    def _record(self, target: JobVm, vm: CloudVm | None) -> None:
        """The VM's lifecycle state in its job, after an operation settled."""
        state = lifecycle_for(vm.state if vm else None, target.vm.state)
        job_vm_states_record(job_id=target.job.pk, states={target.vm.instance_id: state})

    def _gone(self, target: JobVm, vm: CloudVm | None) -> None:
        """The VM is terminated: its job says so and its instance refuses Start from now on."""
        self._record(target, vm)
        vm_gone(
            instance_id=target.vm.console_instance_id,
            message=self.gone_message(target.job, target.vm.instance_id, vm),
        )

    def _refuse_stop_in_group(self, target: JobVm) -> None:
        """The services refuse first (actions, from Instance.stop_refusal): this guards the rest."""
        if refusal := stop_refusal(target.job):
            raise BackendError(refusal)

    # ---- power ------------------------------------------------------------------------------
    def define(self, spec: MachineSpec) -> None:
        """Nothing to prepare: the job's stepCreateVMs made the VM."""

    def start(self, spec: MachineSpec) -> bool:
        target = self._job_vm(spec.id)
        vm = self._usable(target)
        deadline = time.monotonic() + SETTLE_SECONDS  # one wait in all: the task's time is limited
        if vm.state == "stopping":  # clouds refuse to start a VM until it has stopped
            self._wait_for(target, frozenset({"stopped"}), SETTLE_SECONDS)
        launching = vm.state not in ("pending", "running")
        if launching:
            self._call(target, "start")
        remaining = max(0.0, deadline - time.monotonic())
        running = self._reach(
            target, "running", remaining, f"did not reach running within {SETTLE_SECONDS} s."
        )
        self._record(target, running)
        return launching

    def shutdown(self, machine_id: str, grace: float | None = None) -> None:
        """A stop: the cloud shuts the guest OS down cleanly, then powers the VM off."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state in ("stopping", "stopped"):
            return
        self._refuse_stop_in_group(target)
        self._call(target, "stop")

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        target = self._job_vm(machine_id)
        stopped = self._wait_for(target, frozenset({"stopped"}), timeout)
        if stopped is None:
            return False
        self._record(target, stopped)
        return True

    def withdraw_stop(self, machine_id: str) -> None:
        """Nothing to withdraw: a cloud's stop cannot be taken back."""

    def force_stop(self, machine_id: str) -> None:
        """A stop without a clean shutdown of the guest OS (also for a stop that hangs)."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state != "stopped":
            self._refuse_stop_in_group(target)
            self._call(target, "force_stop")
            vm = self._reach(
                target,
                "stopped",
                SETTLE_SECONDS,
                f"did not stop within {SETTLE_SECONDS} s of a forced stop.",
            )
        self._record(target, vm)

    def restart(self, machine_id: str, request: str = "") -> None:
        """The cloud reboots the VM; it stays running."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state != "running":
            raise BackendError(
                f"{self.cloud} {target.vm.instance_id} is {vm.state}: only a running VM can be "
                "rebooted."
            )
        self._call(target, "reboot")
        self._record(target, vm)

    def status(self, machine_id: str) -> MachineStatus:
        target = self._job_vm(machine_id)
        vm = self._describe(target)
        if vm is None:
            raise BackendError(self.gone_message(target.job, target.vm.instance_id, None))
        power = Power.RUNNING if vm.state in ON_STATES else Power.STOPPED
        return MachineStatus(power=power, exit=vm.exit_kind)

    def running_machines(self) -> list[str]:
        """None: cloud VMs are no processes of this host, there is nothing to adopt."""
        return []

    def undefine(self, machine_id: str) -> None:
        """Nothing to remove: the VM is the job's, and its teardown terminates it."""

    # ---- not the console's for these VMs ----------------------------------------------------
    def _unsupported(self, what: str) -> BackendError:
        return BackendError(
            f"{what} of {self.name} instances are not managed by the console: the VM belongs to "
            "its provisioning job, and interactive access goes through the cloud's exec channel "
            f"({self.exec_channel})."
        )

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        raise self._unsupported("Network interfaces")

    def attach_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        raise self._unsupported("Disks")

    def detach_disk(self, machine_id: str, disk_name: str) -> None:
        raise self._unsupported("Disks")

    def resize_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        raise self._unsupported("Disks")

    def snapshot_disks(
        self, machine_id: str, disks: Sequence[DiskSpec], snapshot_name: str
    ) -> bool:
        raise self._unsupported("Disk snapshots")

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        raise self._unsupported("Disk snapshots")

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> int:
        raise self._unsupported("Disk snapshots")

    def change_cdrom(self, machine_id: str, disk_name: str, iso: Path | None) -> None:
        raise self._unsupported("CD-ROM drives")

    def delete_disk(self, disk_name: str) -> None:
        raise self._unsupported("Disks")

    def guest_facts(self, machine_id: str) -> GuestFacts:
        raise self._unsupported("Guest agent facts")

    def guest_exec(self, machine_id: str, argv: list[str], timeout: float = 10) -> tuple[int, str]:
        raise self._unsupported("Guest commands")

    def serial_log(self, machine_id: str) -> Path:
        raise self._unsupported("Serial logs")

    def console_socket(self, machine_id: str, kind: str) -> ConsoleEndpoint:
        raise self._unsupported("Consoles")

    # ---- the details page -------------------------------------------------------------------
    def machine_facts(self, machine_id: str) -> list[MachineFact]:
        """The VM's cloud id, its job (linked) and the lifecycle state the job records; read
        from the database only, never from the cloud."""
        found = self._find(machine_id)
        if found is None:
            return [MachineFact("Provisioning job", "none: this VM is no longer part of a job")]
        job, vm = found.job, found.vm
        state = VmState(vm.state).label if vm.state in VmState.values else vm.state
        url = reverse("provisioning-job-detail", args=[job.project.slug, job.pk])
        facts = [MachineFact(self.cloud, vm.instance_id)]  # "EC2 instance: i-…"
        if vm.zone and vm.zone != job.region:
            facts.append(MachineFact("Zone", vm.zone))
        facts += [
            MachineFact("Region", job.region),
            MachineFact("Provisioning job", job.name, url),
            MachineFact("Lifecycle state", state),
        ]
        if vm.private_ip:
            facts.append(MachineFact("Private IP", vm.private_ip))
        if vm.lb_health:
            health = vm.lb_health + (f" ({vm.lb_health_reason})" if vm.lb_health_reason else "")
            facts.append(MachineFact("Load balancer target", health))
        if vm.state != VmState.TERMINATED:
            facts.append(
                MachineFact(
                    f"Shell ({self.exec_channel}, as your {self.identity} identity)",
                    self.exec_command(job, vm),
                )
            )
        return facts
