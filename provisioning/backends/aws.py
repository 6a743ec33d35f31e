"""The `aws` compute backend: power for the EC2 VMs that provisioning jobs create.

An instance registered by stepRegisterSpace has backend "aws"; its machine id is the console's
("i-<instance pk>"). The backend finds the job VM registered as that instance
(selectors.job_vm_for_instance), and calls EC2 with the job's cloud account and region through
the provider's cached clients (providers.aws.client_for: endpoint URL, role ARN and decrypted
secret included), so the AWS SDK stays inside the provider module.

Start and force stop return once EC2 reports the VM running or stopped, like QEMU's; shutdown
asks EC2 to stop and wait_powered_off polls until it has. After each operation the VM's
lifecycle state in the job's InfraConfig is recorded (services.vms). Disks, interfaces and
consoles of these VMs are not the console's: those calls answer with a BackendError that says so.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.urls import reverse

from instances.backends.base import (
    BackendError,
    DiskSpec,
    ExitKind,
    GuestFacts,
    MachineFact,
    MachineSpec,
    MachineStatus,
    Power,
)
from provisioning.choices import JobStatus, VmState
from provisioning.infra import VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.providers.aws import client_for, mapped_errors
from provisioning.providers.base import CloudError
from provisioning.selectors import JobVm, job_vm_for_instance
from provisioning.services.space import stop_refusal
from provisioning.services.vms import GONE_STATES, job_vm_states_record, lifecycle_for

# EC2 settles in seconds; moto at once. A describe every half second is cheap either way.
POLL_SECONDS = 0.5
# How long start and force stop wait in all for EC2 to report the VM running or stopped: within
# a Celery task's soft time limit.
SETTLE_SECONDS = 300
NOT_FOUND = "InvalidInstanceID.NotFound"
# EC2 states in which the VM is not (yet) off.
ON_STATES = frozenset({"pending", "running", "stopping"})


@dataclass(frozen=True)
class Ec2Vm:
    """One EC2 instance as DescribeInstances reports it."""

    instance_id: str
    state: str  # pending | running | stopping | stopped | shutting-down | terminated
    reason_code: str = ""  # StateReason.Code, e.g. Client.UserInitiatedShutdown
    reason: str = ""  # StateReason.Message
    private_ip: str = ""

    @property
    def exit_kind(self) -> ExitKind:
        """Why the VM is not running, from EC2's state reason."""
        if self.state in ON_STATES:
            return ExitKind.NONE
        if self.reason_code == "Client.InstanceInitiatedShutdown":
            return ExitKind.GUEST_POWEROFF
        if self.reason_code.startswith("Server."):
            return ExitKind.CRASHED
        if self.reason_code.startswith("Client."):
            return ExitKind.REQUESTED
        return ExitKind.NONE


def describe_vms(account: CloudAccount, region: str, instance_ids: list[str]) -> dict[str, Ec2Vm]:
    """The VMs EC2 still knows, by id (a filter, not InstanceIds: an id EC2 has forgotten is
    simply absent rather than failing the whole call)."""
    if not instance_ids:
        return {}
    try:
        with mapped_errors():
            ec2 = client_for(account, "ec2", region)
            pages = ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": instance_ids}]
            )
            found = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    except CloudError as error:
        raise BackendError(error.message, retryable=error.retryable) from error
    return {
        i["InstanceId"]: Ec2Vm(
            instance_id=i["InstanceId"],
            state=i["State"]["Name"],
            reason_code=i.get("StateReason", {}).get("Code", ""),
            reason=i.get("StateReason", {}).get("Message", ""),
            private_ip=i.get("PrivateIpAddress", ""),
        )
        for i in found
    }


def target_health(
    account: CloudAccount, region: str, target_group_arn: str
) -> dict[str, tuple[str, str]]:
    """What the load balancer says of each target: instance id → (state, why)."""
    try:
        with mapped_errors():
            elbv2 = client_for(account, "elbv2", region)
            found = elbv2.describe_target_health(TargetGroupArn=target_group_arn)
    except CloudError as error:
        raise BackendError(error.message, retryable=error.retryable) from error
    return {
        item["Target"]["Id"]: (
            item["TargetHealth"].get("State", ""),
            item["TargetHealth"].get("Description", ""),
        )
        for item in found["TargetHealthDescriptions"]
    }


def ssm_command(job: ProvisioningJob, vm: VmRecord) -> str:
    """The exec channel: a session your own AWS identity must be allowed to start (the console
    does not open it with the account's keys, which would step around that check)."""
    return f"aws ssm start-session --target {vm.instance_id} --region {job.region}"


def gone_message(job: ProvisioningJob, instance_id: str, vm: Ec2Vm | None) -> str:
    """What an instance says when its VM was terminated outside the console."""
    if vm is None:
        what = f"EC2 has no instance {instance_id} in {job.region} any more"
    else:
        what = f"EC2 instance {instance_id} is {vm.state}"
        if vm.reason:
            what += f" ({vm.reason})"
    return (
        f"{what}: it was terminated outside the console and cannot run again. Delete job "
        f"{job.name} to tear the rest of its environment down."
    )


class AwsVmBackend:
    """Start, stop, reboot and status of provisioned EC2 VMs; nothing else."""

    name = "aws"

    # ---- finding the VM ---------------------------------------------------------------------
    def _find(self, machine_id: str) -> JobVm | None:
        prefix, _, number = machine_id.partition("-")
        return job_vm_for_instance(int(number)) if prefix == "i" and number.isdigit() else None

    def _job_vm(self, machine_id: str) -> JobVm:
        found = self._find(machine_id)
        if found is None:
            raise BackendError(
                f"Instance {machine_id} is not a VM of any provisioning job: there is no EC2 "
                "instance to power on or off."
            )
        if found.job.status == JobStatus.TEARING_DOWN:
            raise BackendError(
                f"Job {found.job.name} is tearing its environment down: its VMs are being "
                "terminated."
            )
        return found

    @contextmanager
    def _errors(self, target: JobVm) -> Iterator[None]:
        """SDK errors → CloudError (the provider's mapping) → BackendError with the cloud's own
        message; a VM EC2 no longer knows gets the message that says what happened."""
        try:
            with mapped_errors():
                yield
        except CloudError as error:
            if error.code == NOT_FOUND:
                self._record(target, None)
                raise BackendError(gone_message(target.job, target.vm.instance_id, None)) from error
            raise BackendError(error.message, retryable=error.retryable) from error

    def _call(self, target: JobVm, operation: str, **parameters: Any) -> None:
        """One EC2 call about the VM, e.g. _call(target, "stop_instances", Force=True)."""
        with self._errors(target):
            ec2 = client_for(target.job.account, "ec2", target.job.region)
            getattr(ec2, operation)(InstanceIds=[target.vm.instance_id], **parameters)

    def _describe(self, target: JobVm) -> Ec2Vm | None:
        return describe_vms(target.job.account, target.job.region, [target.vm.instance_id]).get(
            target.vm.instance_id
        )

    def _usable(self, target: JobVm) -> Ec2Vm:
        """The VM as EC2 reports it now; one that is gone is an error that says so."""
        vm = self._describe(target)
        if vm is None or vm.state in GONE_STATES:
            self._record(target, vm)
            raise BackendError(gone_message(target.job, target.vm.instance_id, vm))
        return vm

    def _reach(self, target: JobVm, state: str, timeout: float, failure: str) -> Ec2Vm:
        """_wait_for one state; past the timeout, a retryable BackendError saying `failure`."""
        vm = self._wait_for(target, frozenset({state}), timeout)
        if vm is None:
            raise BackendError(f"EC2 instance {target.vm.instance_id} {failure}", retryable=True)
        return vm

    def _wait_for(self, target: JobVm, states: frozenset[str], timeout: float) -> Ec2Vm | None:
        """Poll until EC2 reports one of `states`; None when the timeout passes first."""
        deadline = time.monotonic() + timeout
        while True:
            vm = self._usable(target)
            if vm.state in states:
                return vm
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(POLL_SECONDS, remaining))

    def _record(self, target: JobVm, vm: Ec2Vm | None) -> None:
        """The VM's lifecycle state in its job, after an operation settled."""
        state = lifecycle_for(vm.state if vm else None, target.vm.state)
        job_vm_states_record(job_id=target.job.pk, states={target.vm.instance_id: state})

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
        if vm.state == "stopping":  # EC2 refuses to start a VM until it has stopped
            self._wait_for(target, frozenset({"stopped"}), SETTLE_SECONDS)
        launching = vm.state not in ("pending", "running")
        if launching:
            self._call(target, "start_instances")
        remaining = max(0.0, deadline - time.monotonic())
        running = self._reach(
            target, "running", remaining, f"did not reach running within {SETTLE_SECONDS} s."
        )
        self._record(target, running)
        return launching

    def shutdown(self, machine_id: str) -> None:
        """StopInstances: EC2 shuts the guest OS down cleanly (then powers the VM off)."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state in ("stopping", "stopped"):
            return
        self._refuse_stop_in_group(target)
        self._call(target, "stop_instances")

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        target = self._job_vm(machine_id)
        stopped = self._wait_for(target, frozenset({"stopped"}), timeout)
        if stopped is None:
            return False
        self._record(target, stopped)
        return True

    def withdraw_stop(self, machine_id: str) -> None:
        """Nothing to withdraw: a StopInstances cannot be taken back, and EC2 itself records
        that a user asked for it (see _exit_kind)."""

    def force_stop(self, machine_id: str) -> None:
        """StopInstances with Force: no clean shutdown of the guest OS (also for a stop that
        hangs)."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state != "stopped":
            self._refuse_stop_in_group(target)
            self._call(target, "stop_instances", Force=True)
            vm = self._reach(
                target,
                "stopped",
                SETTLE_SECONDS,
                f"did not stop within {SETTLE_SECONDS} s of a forced stop.",
            )
        self._record(target, vm)

    def restart(self, machine_id: str) -> None:
        """RebootInstances: EC2 reboots the guest OS; the VM stays running."""
        target = self._job_vm(machine_id)
        vm = self._usable(target)
        if vm.state != "running":
            raise BackendError(
                f"EC2 instance {target.vm.instance_id} is {vm.state}: only a running VM can be "
                "rebooted."
            )
        self._call(target, "reboot_instances")
        self._record(target, vm)

    def status(self, machine_id: str) -> MachineStatus:
        target = self._job_vm(machine_id)
        vm = self._describe(target)
        if vm is None:
            raise BackendError(gone_message(target.job, target.vm.instance_id, None))
        power = Power.RUNNING if vm.state in ON_STATES else Power.STOPPED
        return MachineStatus(power=power, exit=vm.exit_kind)

    def running_machines(self) -> list[str]:
        """None: EC2 VMs are no processes of this host, there is nothing to adopt."""
        return []

    def undefine(self, machine_id: str) -> None:
        """Nothing to remove: the VM is the job's, and its teardown terminates it."""

    # ---- not the console's for these VMs ----------------------------------------------------
    def _unsupported(self, what: str) -> BackendError:
        return BackendError(
            f"{what} of aws instances are not managed by the console: the VM belongs to its "
            "provisioning job, and interactive access goes through the cloud's exec channel "
            "(SSM)."
        )

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        raise self._unsupported("Network interfaces")

    def attach_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        raise self._unsupported("Disks")

    def detach_disk(self, machine_id: str, disk_name: str) -> None:
        raise self._unsupported("Disks")

    def resize_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        raise self._unsupported("Disks")

    def snapshot_disk(self, machine_id: str, disk_name: str, snapshot_name: str) -> bool:
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

    def console_socket(self, machine_id: str, kind: str) -> Path:
        raise self._unsupported("Consoles")

    # ---- the details page -------------------------------------------------------------------
    def machine_facts(self, machine_id: str) -> list[MachineFact]:
        """The VM's EC2 id, its job (linked) and the lifecycle state the job records; read from
        the database only, never from the cloud."""
        found = self._find(machine_id)
        if found is None:
            return [MachineFact("Provisioning job", "none: this VM is no longer part of a job")]
        job, vm = found.job, found.vm
        state = VmState(vm.state).label if vm.state in VmState.values else vm.state
        url = reverse("provisioning-job-detail", args=[job.project.slug, job.pk])
        facts = [
            MachineFact("EC2 instance", vm.instance_id),
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
            facts.append(MachineFact("Shell (SSM, as your AWS identity)", ssm_command(job, vm)))
        return facts
