"""The per-VM lifecycle state a job records (VmRecord.state, choices.VmState), and what a
gone VM's instance says: written after power operations and by the periodic refresh."""

from django.db import transaction

from instances.models import Instance
from provisioning.choices import JOB_TRANSITIONAL, PoolMode, VmState
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob

GONE_STATES = frozenset({"shutting-down", "terminated"})
UNSETTLED_STATES = frozenset({"pending", "stopping"})
# How a gone VM's message starts when the sandbox (a local moto) restarted and forgot it: no
# cloud failed, so its instance is Stopped (and cannot start), not Failed.
SANDBOX_RESET = "The sandbox was reset"


def lifecycle_for(cloud_state: str | None, current: str) -> str:
    """The VmState for what the cloud reports (None: the cloud no longer knows the VM).

    Running is ready again (its sentinel stays on disk) unless still launching or bootstrapping,
    which the pipeline decides; a VM between two states keeps the one it had.
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
    """Record some of a job's VM lifecycle states (cloud id -> VmState); return those changed.

    Under the job's row lock; a VM no longer at its `expected` state, or any while a phase owns
    the InfraConfig, is skipped. `health` (id -> LB state, why) is set for all VMs, empty if absent.
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


def vm_gone(*, instance_id: int | None, message: str) -> None:
    """The cloud no longer runs this instance's VM: Start is refused from now on, with `message`
    (stepRegisterSpace clears it when a job makes the VM again)."""
    if instance_id:
        Instance.objects.filter(pk=instance_id).update(start_refusal=message[:300])


def stop_refusal(job: ProvisioningJob) -> str:
    """Why the console must not stop a VM of this job, or "" (see Instance.stop_refusal)."""
    if job.pool_mode != PoolMode.ASG:
        return ""
    return (
        f"This VM belongs to the auto scaling group of job {job.name}: the group would replace "
        "a stopped VM. Change the group's desired capacity instead."
    )
