"""The per-VM lifecycle state of landed jobs: recorded after power operations, and read back from
the cloud periodically so that a VM stopped or terminated outside the console shows on its
instance and in its job.

The state lives in the job's InfraConfig (VmRecord.state, choices.VmState), as the product says.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from instances.backends.base import BackendError
from instances.choices import LastExit, PowerState
from instances.models import Instance
from instances.services.observed import instance_power_observe
from provisioning.choices import JOB_TRANSITIONAL, JobStatus, Provider, VmState
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.providers.base import CloudError

log = logging.getLogger(__name__)

# Jobs whose VMs may be registered as instances and are not being changed by a pipeline phase
# (a running step saves its own copy of the InfraConfig).
REFRESHED_STATUSES = (JobStatus.READY, JobStatus.FAILED, JobStatus.CANCELLED)
GONE_STATES = frozenset({"shutting-down", "terminated"})
UNSETTLED_STATES = frozenset({"pending", "stopping"})
# How a gone VM's message starts when the sandbox (a local moto) restarted and forgot it: no
# cloud failed, so its instance is Stopped (and cannot start), not Failed.
SANDBOX_RESET = "The sandbox was reset"


def lifecycle_for(cloud_state: str | None, current: str) -> str:
    """The VmState for what the cloud reports (None: the cloud no longer knows the VM).

    A running VM that had been ready (or stopped) is ready again: its bootstrap ran once and its
    sentinel stays on disk. Readiness of a VM still launching or bootstrapping is the pipeline's
    to decide, and a VM between two states keeps the one it had.
    """
    if cloud_state is None or cloud_state in GONE_STATES:
        return VmState.TERMINATED
    if cloud_state == "stopped":
        return VmState.STOPPED
    if cloud_state == "running" and current not in (VmState.LAUNCHING, VmState.BOOTSTRAPPING):
        return VmState.READY
    return current


def job_vm_states_record(
    *,
    job_id: int,
    states: dict[str, str],
    expected: dict[str, str] | None = None,
    health: dict[str, tuple[str, str]] | None = None,
) -> list[str]:
    """Write the lifecycle state of some of a job's VMs (cloud instance id → VmState) into its
    InfraConfig; the ids whose state changed.

    With `expected` (id → the state the caller read before asking the cloud), a VM whose state
    changed meanwhile (a power operation recorded a newer one) is left alone. The InfraConfig is
    read and written in one transaction on the job's row, so no other key of it is lost. While
    a phase runs (attaching a load balancer, say), its steps own the InfraConfig and save their
    copy of it: nothing is recorded then, and the first refresh after the phase lands reads the
    states back.

    With `health` (id → the load balancer's state of the VM and why), every VM's is written:
    one the load balancer does not name has none (the job has no load balancer, say).
    """
    with transaction.atomic():
        job = ProvisioningJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in JOB_TRANSITIONAL:
            return []
        config = InfraConfig.from_json(job.config)
        changed = []
        dirty = False
        for vm in config.vms:
            if health is not None:
                lb_health, reason = health.get(vm.instance_id, ("", ""))
                if (vm.lb_health, vm.lb_health_reason) != (lb_health, reason):
                    vm.lb_health, vm.lb_health_reason, dirty = lb_health, reason, True
            state = states.get(vm.instance_id)
            if state is None or state == vm.state:
                continue
            if expected is not None and expected.get(vm.instance_id) != vm.state:
                continue
            vm.state = state
            changed.append(vm.instance_id)
        if changed or dirty:
            ProvisioningJob.objects.filter(pk=job_id).update(config=config.to_json())
    return changed


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
    """Read the job's registered VMs from the cloud and record what it says.

    1. Read the instance rows and the recorded lifecycle states first, then ask the cloud: a
       power operation that settles in between makes the writes below skip that VM.
    2. Record each VM's lifecycle state in the InfraConfig (lifecycle_for), and what the load
       balancer, if the job has one, says of it.
    3. Give each VM's instance the power state the cloud reports (Running, Stopped with how it
       stopped, or Failed with the reason when the VM is gone); a VM between two states, or an
       instance in a power operation, is left alone.
    Returns the cloud ids whose lifecycle state changed.
    """
    from provisioning.backends import backend_class

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
    backend = backend_class(job.provider)
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


def vm_gone(*, instance_id: int | None, message: str) -> None:
    """The cloud no longer runs this instance's VM: Start is refused from now on, with `message`
    (stepRegisterSpace clears it when a job makes the VM again)."""
    if instance_id:
        Instance.objects.filter(pk=instance_id).update(start_refusal=message[:300])


def jobs_refresh_vms() -> list[int]:
    """Periodic (beat): refresh the VMs of every landed AWS or GCP job that is due; the ids of the
    jobs refreshed. A cloud that does not answer is logged and asked again next time."""
    refreshed = []
    jobs = ProvisioningJob.objects.filter(
        provider__in=[Provider.AWS, Provider.GCP], status__in=REFRESHED_STATUSES
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
