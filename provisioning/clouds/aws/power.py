"""The `aws` compute backend: power for the EC2 VMs that provisioning jobs create (the rest is
clouds.power's), through the account's cached clients (aws.sdk.client_for)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from instances.backends.base import BackendError, ExitKind
from provisioning.clouds.aws.sandbox import sandbox_was_reset
from provisioning.clouds.aws.sdk import client_for, mapped_errors
from provisioning.clouds.aws.ssm_console import SsmConsole
from provisioning.clouds.errors import CloudError
from provisioning.clouds.power import ON_STATES, CloudVm, CloudVmBackend
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.selectors import JobVm
from provisioning.vm_states import SANDBOX_RESET

NOT_FOUND = "InvalidInstanceID.NotFound"
ID_FILTER_VALUES = 200  # the most values EC2 takes in one filter


def sandbox_reset_message(job: ProvisioningJob) -> str:
    return (
        f"{SANDBOX_RESET} (its local moto server restarted and keeps nothing): this VM is gone "
        f"with it, and no cloud failed. Delete job {job.name} and provision it again."
    )


# What the console asks → the EC2 call and its parameters.
POWER_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "start": ("start_instances", {}),
    "stop": ("stop_instances", {}),  # EC2 shuts the guest OS down cleanly
    "force_stop": ("stop_instances", {"Force": True}),
    "reboot": ("reboot_instances", {}),  # the guest OS reboots; the VM stays running
}


def exit_kind(state: str, reason_code: str) -> ExitKind:
    """Why the VM is not running, from EC2's state reason (e.g. Client.UserInitiatedShutdown)."""
    if state in ON_STATES:
        return ExitKind.NONE
    if reason_code == "Client.InstanceInitiatedShutdown":
        return ExitKind.GUEST_POWEROFF
    if reason_code.startswith("Server."):
        return ExitKind.CRASHED
    if reason_code.startswith("Client."):
        return ExitKind.REQUESTED
    return ExitKind.NONE


class AwsVmBackend(CloudVmBackend):
    name = "aws"
    service = "EC2"
    identity = "AWS"
    exec_channel = "SSM"
    console_kinds = frozenset({"exec"})  # a Session Manager shell, in the browser

    def console_socket(self, machine_id: str, kind: str) -> SsmConsole:
        """The VM's Session Manager channel, started with the job's account: the console's
        roles decide who opens it, the account's IAM whether AWS lets it start."""
        if kind != "exec":
            raise self._unsupported(f"{kind.capitalize()} consoles")
        target = self._job_vm(machine_id)
        account, region = target.job.account, target.job.region
        try:
            with mapped_errors():
                ssm, ec2 = client_for(account, "ssm", region), client_for(account, "ec2", region)
        except CloudError as error:
            raise BackendError(f"Cannot open a Session Manager session: {error.message}") from error
        return SsmConsole(
            target.vm.instance_id, region, account.role_arn, ssm, ec2, sandbox=account.sandbox
        )

    @classmethod
    def gone_message(cls, job: ProvisioningJob, instance_id: str, vm: CloudVm | None) -> str:
        """A VM the sandbox forgot because it restarted is no cloud failure: said as it is."""
        if vm is None and job.account.sandbox:
            recorded = str(job.config.get("resources", {}).get("sandbox_epoch", ""))
            try:
                reset = sandbox_was_reset(job.account, job.region, recorded)
            except CloudError:
                reset = False
            if reset:
                return sandbox_reset_message(job)
        return super().gone_message(job, instance_id, vm)

    @classmethod
    def describe(
        cls, account: CloudAccount, region: str, vms: list[VmRecord]
    ) -> dict[str, CloudVm]:
        """A filter, not InstanceIds: an id EC2 has forgotten is absent rather than failing the
        whole call. One DescribeInstances (paged) per ID_FILTER_VALUES ids."""
        ids = [vm.instance_id for vm in vms]
        found = []
        with mapped_errors():
            ec2 = client_for(account, "ec2", region)
            for start in range(0, len(ids), ID_FILTER_VALUES):
                chunk = ids[start : start + ID_FILTER_VALUES]
                pages = ec2.get_paginator("describe_instances").paginate(
                    Filters=[{"Name": "instance-id", "Values": chunk}]
                )
                found += [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
        return {
            i["InstanceId"]: CloudVm(
                instance_id=i["InstanceId"],
                state=i["State"]["Name"],
                exit_kind=exit_kind(i["State"]["Name"], i.get("StateReason", {}).get("Code", "")),
                reason=i.get("StateReason", {}).get("Message", ""),
                private_ip=i.get("PrivateIpAddress", ""),
            )
            for i in found
        }

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        with mapped_errors():
            yield

    def _vm_gone(self, error: CloudError) -> bool:
        return error.code == NOT_FOUND

    def _power(self, target: JobVm, operation: str) -> None:
        call, parameters = POWER_CALLS[operation]
        ec2 = client_for(target.job.account, "ec2", target.job.region)
        getattr(ec2, call)(InstanceIds=[target.vm.instance_id], **parameters)

    @classmethod
    def lb_health(cls, job: ProvisioningJob, config: InfraConfig) -> dict[str, tuple[str, str]]:
        with mapped_errors():
            elbv2 = client_for(job.account, "elbv2", job.region)
            found = elbv2.describe_target_health(TargetGroupArn=config.resources["target_group"])
        return {
            item["Target"]["Id"]: (
                item["TargetHealth"].get("State", ""),
                item["TargetHealth"].get("Description", ""),
            )
            for item in found["TargetHealthDescriptions"]
        }

    @classmethod
    def exec_command(cls, job: ProvisioningJob, vm: VmRecord) -> str:
        """The same shell from the user's own terminal, as their own AWS identity."""
        return f"aws ssm start-session --target {vm.instance_id} --region {job.region}"
