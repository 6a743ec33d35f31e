"""The periodic refresh of landed jobs' VMs: their state read back from the cloud, so that a VM
stopped or terminated outside the console shows on its instance and in its job."""

import logging
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from instances.backends.base import BackendError
from instances.choices import LastExit, PowerState
from instances.models import Instance
from instances.services.observed import instance_power_observe
from provisioning.choices import JobStatus, VmState
from provisioning.clouds import available, cloud_for
from provisioning.clouds.errors import CloudError
from provisioning.clouds.power import CloudVm
from provisioning.infra import InfraConfig, VmRecord
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


def _claim_due() -> list[int]:
    """Claim every due job at once: a conditional UPDATE stamping this round's own time, then
    the ids bearing it, so two beat ticks (or two workers) never read the same job's VMs twice
    within half the interval."""
    now = timezone.now()
    due = now - timedelta(seconds=settings.ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS / 2)
    landed = ProvisioningJob.objects.filter(
        provider__in=[cloud.name for cloud in available()], status__in=REFRESHED_STATUSES
    )
    landed.filter(Q(vms_refreshed_at__isnull=True) | Q(vms_refreshed_at__lt=due)).update(
        vms_refreshed_at=now
    )
    return list(landed.filter(vms_refreshed_at=now).order_by("pk").values_list("pk", flat=True))


def _registered(job: ProvisioningJob) -> tuple[InfraConfig, list[VmRecord]]:
    config = InfraConfig.from_json(job.config)
    return config, [vm for vm in config.vms if vm.console_instance_id]


def job_vms_refresh(*, job: ProvisioningJob) -> list[str]:
    """Read the job's registered VMs from the cloud, record their lifecycle and load balancer state,
    and give their instances the reported power state; return the ids whose lifecycle changed."""
    config, vms = _registered(job)
    if not vms:
        return []
    instances = Instance.objects.select_related("project").in_bulk(
        [vm.console_instance_id for vm in vms]
    )
    backend = cloud_for(job.provider).vm_backend()
    try:
        described = backend.describe(job.account, job.region, vms)
    except CloudError as error:
        raise BackendError(error.message, retryable=error.retryable) from error
    return _apply(job, config, vms, instances, described)


def _apply(
    job: ProvisioningJob,
    config: InfraConfig,
    vms: list[VmRecord],
    instances: dict[int, Instance],
    described: dict[str, CloudVm],
) -> list[str]:
    """Record what the cloud described of the job's VMs (read before the cloud was asked, so a
    power operation that settles meanwhile wins); the job's row is locked only on a change."""
    backend = cloud_for(job.provider).vm_backend()
    health: dict[str, tuple[str, str]] | None = {}
    if config.load_balancer and config.resources.get("target_group"):
        try:
            health = backend.lb_health(job, config)
        except CloudError as error:  # the VMs' own states are recorded all the same
            log.warning("reading the target health of job %s: %s", job.pk, error.message)
            health = None
    states = {
        vm.instance_id: lifecycle_for(
            described[vm.instance_id].state if vm.instance_id in described else None, vm.state
        )
        for vm in vms
    }
    changed: list[str] = []
    if _differs(config, states, health):
        changed = job_vm_states_record(
            job_id=job.pk,
            states=states,
            expected={vm.instance_id: vm.state for vm in vms},
            health=health,
        )
    for vm in vms:
        instance = instances.get(vm.console_instance_id or 0)
        cloud = described.get(vm.instance_id)
        if instance is None or instance.backend != job.provider:
            continue
        if cloud is not None and cloud.state in UNSETTLED_STATES:
            continue
        if cloud is None or cloud.state in GONE_STATES:
            if (
                vm.state == VmState.TERMINATED
                and instance.start_refusal
                and (instance.power_state in (PowerState.FAILED, PowerState.STOPPED))
            ):
                continue  # said at an earlier round: nothing to ask or write again
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


def _differs(
    config: InfraConfig, states: dict[str, str], health: dict[str, tuple[str, str]] | None
) -> bool:
    """Whether the cloud's word differs from the config as read (else there is nothing to write)."""
    for vm in config.vms:
        if vm.instance_id in states and states[vm.instance_id] != vm.state:
            return True
        if health is not None and health.get(vm.instance_id, ("", "")) != (
            vm.lb_health,
            vm.lb_health_reason,
        ):
            return True
    return False


def jobs_refresh_vms() -> list[int]:
    """Periodic (beat): refresh the VMs of every landed job that is due; the ids of the jobs
    refreshed. The VMs of all jobs of one account and region are described together (a few
    batched calls, not one per job or VM); a cloud that does not answer is logged and asked
    again next time."""
    jobs = ProvisioningJob.objects.filter(pk__in=_claim_due()).select_related("account")
    groups: dict[tuple[str, int, str], list[ProvisioningJob]] = defaultdict(list)
    for job in jobs.order_by("pk"):
        groups[job.provider, job.account_id, job.region].append(job)
    registered = {job.pk: _registered(job) for members in groups.values() for job in members}
    instances = Instance.objects.select_related("project").in_bulk(
        [vm.console_instance_id for _, vms in registered.values() for vm in vms]
    )
    refreshed = []
    for (provider, _, region), members in groups.items():
        vms = [vm for job in members for vm in registered[job.pk][1]]
        try:
            described = cloud_for(provider).vm_backend().describe(members[0].account, region, vms)
        except CloudError as error:
            for job in members:
                log.warning("refreshing the VMs of job %s: %s", job.pk, error.message)
            continue
        for job in members:
            config, job_vms = registered[job.pk]
            if job_vms:
                _apply(job, config, job_vms, instances, described)
            refreshed.append(job.pk)
    return sorted(refreshed)
