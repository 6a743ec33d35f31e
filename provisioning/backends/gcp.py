"""The `gcp` compute backend: power for the GCE VMs that provisioning jobs create (the rest is
backends.cloud's). GCE is called with the job's cloud account through the provider's cached
clients (providers.gcp_sdk), so Google's SDK stays inside the provider modules.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from provisioning.backends.cloud import CloudVm, CloudVmBackend
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.providers.base import CloudError
from provisioning.providers.gcp import VM_STATES
from provisioning.providers.gcp_base import project_of
from provisioning.providers.gcp_sdk import client_for, mapped_errors, wait_operation
from provisioning.selectors import JobVm

NOT_FOUND = "NotFound"  # Compute errors carry no reason: mapped_errors names the type


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
        instances = client_for(account, compute_v1.InstancesClient)
        found = {}
        with mapped_errors():
            for vm in vms:
                try:
                    instance = instances.get(
                        project=project_of(account), zone=vm.zone, instance=vm.instance_id
                    )
                except api_exceptions.NotFound:
                    continue
                interfaces = list(instance.network_interfaces)
                found[vm.instance_id] = CloudVm(
                    instance_id=vm.instance_id,
                    state=VM_STATES.get(instance.status, instance.status.lower()),
                    reason=instance.status_message,
                    private_ip=interfaces[0].network_i_p if interfaces else "",
                )
        return found

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        with mapped_errors():
            yield

    def _vm_gone(self, error: CloudError) -> bool:
        return error.code == NOT_FOUND

    def _power(self, target: JobVm, operation: str) -> None:
        """start; stop (ACPI, then GCE powers off after its grace period); force_stop (no
        graceful shutdown); reboot (a reset: GCE has no soft reboot)."""
        account, vm = target.job.account, target.vm
        instances = client_for(account, compute_v1.InstancesClient)
        where = {"project": project_of(account), "zone": vm.zone, "instance": vm.instance_id}
        if operation == "start":
            started = instances.start_unary(compute_v1.StartInstanceRequest(**where))
        elif operation in ("stop", "force_stop"):
            request = compute_v1.StopInstanceRequest(
                **where, no_graceful_shutdown=operation == "force_stop"
            )
            started = instances.stop_unary(request)
        else:
            started = instances.reset_unary(compute_v1.ResetInstanceRequest(**where))
        wait_operation(account, project_of(account), started, heartbeat=lambda: None, timeout=120)

    @classmethod
    def lb_health(cls, job: ProvisioningJob, config: InfraConfig) -> dict[str, tuple[str, str]]:
        from provisioning.providers.gcp import GcpProvider

        with mapped_errors():
            return GcpProvider(job.account, job.region).backend_health(config)

    @classmethod
    def exec_command(cls, job: ProvisioningJob, vm: VmRecord) -> str:
        return (
            f"gcloud compute ssh {vm.instance_id} --zone {vm.zone} "
            f"--project {project_of(job.account)} --tunnel-through-iap"
        )
