"""The `gcp` compute backend: power for the GCE VMs that provisioning jobs create (the rest is
clouds.power's), through the account's cached clients (gcp.sdk)."""

from collections.abc import Iterator
from contextlib import contextmanager

from instances.backends.base import BackendError, SerialOutput
from provisioning.choices import VmState
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.base import project_of
from provisioning.clouds.gcp.instances import list_vms, power_vm, read_vm, serial_output
from provisioning.clouds.gcp.sdk import key_info, mapped_errors
from provisioning.clouds.power import CloudVm, CloudVmBackend
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.selectors import JobVm

NOT_FOUND = frozenset({"notFound", "NotFound"})  # a Compute 404: its reason, or its type
# From this many VMs on, describe lists the project's VMs once rather than reading each.
LIST_FROM = 3


class GcpVmBackend(CloudVmBackend):
    name = "gcp"
    service = "GCE"
    identity = "Google"
    exec_channel = "OS Login"
    serial_output_channel = "Live serial output through the Compute API (read-only)"

    @classmethod
    def describe(
        cls, account: CloudAccount, region: str, vms: list[VmRecord]
    ) -> dict[str, CloudVm]:
        """A few VMs read one by one; more, with one aggregatedList of the project (they may
        live in different zones). One GCE no longer knows is absent."""
        if len(vms) < LIST_FROM:
            reads = []
            with mapped_errors():
                for vm in vms:
                    if (read := read_vm(account, vm.zone, vm.instance_id)) is not None:
                        reads.append(read)
        else:
            with mapped_errors():
                listed = {(read["zone"], read["instance_id"]): read for read in list_vms(account)}
            reads = [
                listed[vm.zone, vm.instance_id] for vm in vms if (vm.zone, vm.instance_id) in listed
            ]
        return {
            read["instance_id"]: CloudVm(
                instance_id=read["instance_id"],
                state=read["state"],
                reason=read["reason"],
                private_ip=read["private_ip"],
            )
            for read in reads
        }

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        with mapped_errors():
            yield

    def _vm_gone(self, error: CloudError) -> bool:
        return error.code in NOT_FOUND

    def _power(self, target: JobVm, operation: str) -> None:
        power_vm(target.job.account, target.vm.zone, target.vm.instance_id, operation)

    @classmethod
    def lb_health(cls, job: ProvisioningJob, config: InfraConfig) -> dict[str, tuple[str, str]]:
        from provisioning.clouds.gcp.steps import GcpSteps

        with mapped_errors():
            return GcpSteps(job.account, job.region).backend_health(config)

    @classmethod
    def exec_command(cls, job: ProvisioningJob, vm: VmRecord) -> str:
        return (
            f"gcloud compute ssh {vm.instance_id} --zone {vm.zone} "
            f"--project {project_of(job.account)} --tunnel-through-iap"
        )

    def shell_command(self, machine_id: str) -> str:
        """exec_command of the VM, or "" when it is no longer a job's or was terminated."""
        found = self._find(machine_id)
        if found is None or found.vm.state == VmState.TERMINATED:
            return ""
        return self.exec_command(found.job, found.vm)

    def serial_output(self, machine_id: str, start: int) -> SerialOutput:
        """Port 1's output from byte `start`, read with the job's account: GCE's IAM decides
        whether its service account may (compute.instances.getSerialPortOutput)."""
        target = self._job_vm(machine_id)
        account, vm = target.job.account, target.vm
        try:
            with mapped_errors():
                read = serial_output(account, vm.zone, vm.instance_id, max(0, start))
        except CloudError as error:
            message = self._serial_message(target, error)
            raise BackendError(message, retryable=error.retryable) from error
        return SerialOutput(text=read["contents"], start=read["start"], next=read["next"])

    def _serial_message(self, target: JobVm, error: CloudError) -> str:
        """What the page says when GCE does not serve the output: what to grant, or why."""
        name = target.vm.instance_id
        if error.code == "forbidden" or "getSerialPortOutput" in error.message:
            try:
                who = f"service account {key_info(target.job.account)['client_email']}"
            except (CloudError, KeyError):
                who = "the account's service account"
            return (
                f"GCE refused to read the serial output of {name}: {who} lacks the IAM "
                f"permission compute.instances.getSerialPortOutput (in roles/compute.viewer) "
                f"on project {project_of(target.job.account)}. ({error.message})"
            )
        if self._vm_gone(error):
            return f"GCE has no instance {name} in {target.vm.zone} any more: no serial output."
        if error.retryable:
            return f"Could not read the serial output of {name} now: {error.message}"
        return f"GCE refused to read the serial output of {name}: {error.message}"
