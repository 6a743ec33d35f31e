"""Reads of the provisioning app that other parts of the console need."""

from dataclasses import dataclass

from instances.models import Instance
from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import ProvisioningJob


@dataclass(frozen=True)
class JobVm:
    """A VM of a provisioning job, as the job's InfraConfig records it."""

    job: ProvisioningJob  # with its account
    config: InfraConfig
    vm: VmRecord


def job_vm_for_instance(instance_id: int) -> JobVm | None:
    """The job VM registered as this instance (stepRegisterSpace records the instance's id on
    the VM), or None. Looks through the jobs of the instance's project, newest first."""
    project_id = Instance.objects.filter(pk=instance_id).values_list("project_id", flat=True)
    jobs = (
        ProvisioningJob.objects.filter(project_id__in=project_id)
        .exclude(status=JobStatus.DELETED)
        .select_related("account", "project")
        .order_by("-pk")
    )
    for job in jobs:
        config = InfraConfig.from_json(job.config)
        for vm in config.vms:
            if vm.console_instance_id == instance_id:
                return JobVm(job=job, config=config, vm=vm)
    return None
