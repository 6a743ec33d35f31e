"""The periodic refresh of landed jobs' VMs: their state read back from the cloud, so that a VM
stopped or terminated outside the console shows on its instance and in its job."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from instances.backends.base import BackendError
from instances.choices import LastExit, PowerState
from instances.models import Instance
from instances.services.observed import instance_power_observe
from provisioning.choices import JobStatus
from provisioning.clouds import available, cloud_for
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.vm_states import (
    GONE_STATES,
    SANDBOX_RESET,
    UNSETTLED_STATES,
    job_vm_states_record,
    lifecycle_for,
    vm_gone,
)

log = logging.getLogger(__name__)

# Jobs whose VMs may be registered as instances and are not being changed by a pipeline phase
# (a running step saves its own copy of the InfraConfig).
REFRESHED_STATUSES = (JobStatus.READY, JobStatus.FAILED, JobStatus.CANCELLED)


def _claim_refresh(job_id: int) -> bool:
    """One refresh of a job at a time: a conditional UPDATE, so two beat ticks (or two workers)
    never read the same job's VMs twice within half the interval."""
    now = timezone.now()
    due = now - timedelta(seconds=settings.ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS / 2)
    return bool(
        ProvisioningJob.objects.filter(
            Q(vms_refreshed_at__isnull=True) | Q(vms_refreshed_at__lt=due), pk=job_id
        ).update(vms_refreshed_at=now)
    )


def job_vms_refresh(*, job: ProvisioningJob) -> list[str]:
    """Read the job's registered VMs from the cloud, record their lifecycle and load balancer state,
    and give their instances the reported power state; return the ids whose lifecycle changed.

    Rows are read before the cloud is asked, so a power operation that settles meanwhile wins.
    """
    config = InfraConfig.from_json(job.config)
    vms = [vm for vm in config.vms if vm.console_instance_id]
    if not vms:
        return []
    instances = (
        Instance.objects.filter(backend=job.provider)
        .select_related("project")
        .in_bulk([vm.console_instance_id for vm in vms])
    )
    expected = {vm.instance_id: vm.state for vm in vms}
    backend = cloud_for(job.provider).vm_backend()
    try:
        described = backend.describe(job.account, job, vms)
    except CloudError as error:
        raise BackendError(error.message, retryable=error.retryable) from error
    health: dict[str, tuple[str, str]] | None = {}
    if config.load_balancer and config.resources.get("target_group"):
        try:
            health = backend.lb_health(job, config)
        except CloudError as error:  # the VMs' own states are recorded all the same
            log.warning("reading the target health of job %s: %s", job.pk, error.message)
            health = None
    changed = job_vm_states_record(
        job_id=job.pk,
        states={
            vm.instance_id: lifecycle_for(
                described[vm.instance_id].state if vm.instance_id in described else None,
                vm.state,
            )
            for vm in vms
        },
        expected=expected,
        health=health,
    )
    for vm in vms:
        instance = instances.get(vm.console_instance_id or 0)
        cloud = described.get(vm.instance_id)
        if instance is None or (cloud is not None and cloud.state in UNSETTLED_STATES):
            continue
        if cloud is None or cloud.state in GONE_STATES:
            message = backend.gone_message(job, vm.instance_id, cloud)
            reset = message.startswith(SANDBOX_RESET)
            instance_power_observe(
                instance=instance,
                state=PowerState.STOPPED if reset else PowerState.FAILED,
                last_exit=LastExit(cloud.exit_kind.value) if cloud else LastExit.NONE,
                message=message,
            )
            vm_gone(instance_id=instance.pk, message=message)
        elif cloud.state == "stopped":
            instance_power_observe(
                instance=instance,
                state=PowerState.STOPPED,
                last_exit=LastExit(cloud.exit_kind.value),
            )
        else:
            instance_power_observe(instance=instance, state=PowerState.RUNNING)
    return changed


def jobs_refresh_vms() -> list[int]:
    """Periodic (beat): refresh the VMs of every landed job that is due; the ids of the jobs
    refreshed. A cloud that does not answer is logged and asked again next time."""
    refreshed = []
    jobs = ProvisioningJob.objects.filter(
        provider__in=[cloud.name for cloud in available()], status__in=REFRESHED_STATUSES
    ).select_related("account")
    for job in jobs:
        if not _claim_refresh(job.pk):
            continue
        try:
            job_vms_refresh(job=job)
        except BackendError as error:
            log.warning("refreshing the VMs of job %s: %s", job.pk, error.message)
            continue
        refreshed.append(job.pk)
    return refreshed
