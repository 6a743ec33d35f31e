"""One rule per job action: it hides the buttons and guards the services and the API."""

from instances.actions import YES, Allowed
from instances.choices import Role
from provisioning.choices import JOB_TRANSITIONAL, JobStatus, Phase, PoolMode
from provisioning.models import ProvisioningJob

VM_OPS = ("attach_lb", "detach_lb")


def _role_check(role: Role | None, needed: Role) -> Allowed:
    if role is None or not role.allows(needed):
        return Allowed(False, f"Needs the {needed.label.lower()} role.")
    return YES


def create(role: Role | None) -> Allowed:
    return _role_check(role, Role.OPERATOR)


def retry(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if job.status != JobStatus.FAILED:
        return Allowed(False, "Only a failed job can be retried.")
    return YES


def cancel(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if job.status not in JOB_TRANSITIONAL or job.phase == Phase.TEARDOWN:
        return Allowed(False, "Only a job that is provisioning or updating can be cancelled.")
    return YES


def delete(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.ADMIN)):
        return allowed
    if job.status == JobStatus.DELETED:
        return Allowed(False, "The job's resources are already deleted.")
    if job.status in JOB_TRANSITIONAL:
        return Allowed(False, "Wait until the job settles, or cancel it first.")
    return YES


def attach_lb(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if job.status != JobStatus.READY:
        return Allowed(False, "A load balancer can be attached to a ready job only.")
    if job.config.get("load_balancer"):
        return Allowed(False, "The job already has a load balancer.")
    if job.config.get("schedule_applied") == "off":  # a stopped VM cannot be a target
        return Allowed(False, "The stop schedule has the VMs stopped: attach it in their hours.")
    return YES


def detach_lb(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if job.status != JobStatus.READY:
        return Allowed(False, "A load balancer can be detached from a ready job only.")
    if not job.config.get("load_balancer"):
        return Allowed(False, "The job has no load balancer.")
    return YES


def health_check(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if not job.config.get("load_balancer"):
        return Allowed(False, "The job has no load balancer.")
    failed_change = job.status == JobStatus.FAILED and job.phase == Phase.HEALTH_CHECK
    if job.status != JobStatus.READY and not failed_change:  # a refused change is corrected
        return Allowed(False, "The health check can be changed on a ready job only.")
    return YES


def schedule(job: ProvisioningJob, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if job.status != JobStatus.READY:
        return Allowed(False, "A schedule can be set on a ready job only.")
    if job.config.get("pool_mode") != PoolMode.FIXED:
        return Allowed(False, "A stop schedule is for a Fixed pool: an ASG pool sets its own size.")
    return YES


RULES = {
    "retry": retry,
    "cancel": cancel,
    "delete": delete,
    "attach_lb": attach_lb,
    "detach_lb": detach_lb,
    "health_check": health_check,
    "schedule": schedule,
}


def job_allowed_actions(job: ProvisioningJob, role: Role | None) -> dict[str, Allowed]:
    return {name: rule(job, role) for name, rule in RULES.items()}
