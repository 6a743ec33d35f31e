"""Reads of the provisioning app that other parts of the console need."""

from dataclasses import dataclass

from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import JobInstance, ProvisioningJob


@dataclass(frozen=True)
class JobVm:
    """A VM of a provisioning job, as the job's InfraConfig records it."""

    job: ProvisioningJob  # with its account
    config: InfraConfig
    vm: VmRecord


def job_vm_for_instance(instance_id: int) -> JobVm | None:
    """The job VM registered as this instance (stepRegisterSpace links the two), or None."""
    link = (
        JobInstance.objects.filter(instance_id=instance_id)
        .exclude(job__status=JobStatus.DELETED)
        .select_related("job__account", "job__project")
        .first()
    )
    if link is None:
        return None
    config = InfraConfig.from_json(link.job.config)
    for vm in config.vms:
        if vm.console_instance_id == instance_id:
            return JobVm(job=link.job, config=config, vm=vm)
    return None
