"""The `gcp` compute backend: power for the GCE VMs that provisioning jobs create (the rest is
clouds.power's), through the account's cached clients (gcp.sdk)."""

from collections.abc import Iterator
from contextlib import contextmanager

from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.base import project_of
from provisioning.clouds.gcp.instances import power_vm, read_vm
from provisioning.clouds.gcp.sdk import mapped_errors
from provisioning.clouds.power import CloudVm, CloudVmBackend
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.selectors import JobVm

NOT_FOUND = frozenset({"notFound", "NotFound"})  # a Compute 404: its reason, or its type


class GcpVmBackend(CloudVmBackend):
    name = "gcp"
    service = "GCE"
    identity = "Google"
    exec_channel = "OS Login"

    @classmethod
    def describe(
        cls, account: CloudAccount, job: ProvisioningJob, vms: list[VmRecord]
    ) -> dict[str, CloudVm]:
        """One read per VM (they live in different zones); one GCE no longer knows is absent."""
        found = {}
        with mapped_errors():
            for vm in vms:
                if (read := read_vm(account, vm.zone, vm.instance_id)) is not None:
                    found[vm.instance_id] = CloudVm(
                        instance_id=vm.instance_id, state=read["state"], reason=read["reason"],
                        private_ip=read["private_ip"],
                    )  # fmt: skip
        return found

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
