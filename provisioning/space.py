"""stepRegisterSpace's record in the console: the job's VMs as instances of the project."""

from django.db import transaction
from django.template.defaultfilters import pluralize
from django.utils import timezone

from instances.choices import PowerState
from instances.models import Instance, Project
from provisioning.choices import JobStatus, PoolMode
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig
from provisioning.models import JobInstance, ProvisioningJob
from provisioning.prices import machine_size
from provisioning.vm_states import stop_refusal


def name_clash(*, project: Project, name: str, config: InfraConfig) -> str:
    """Why a new job may not take this name in the project, or "": the name is another job's
    (not deleted), or an instance its VMs would be registered as (<name>-1, ...) is already
    something else's (stepRegisterSpace would stop there)."""
    if (
        ProvisioningJob.objects.filter(project=project, name=name)
        .exclude(status=JobStatus.DELETED)
        .exists()
    ):
        return f"Job {name} exists already in this project: choose another name."
    names = [f"{name}-{number}" for number in range(1, _vm_names_count(config) + 1)]
    for instance in Instance.objects.filter(project=project, name__in=names).order_by("name"):
        if not _adoptable(instance, config.provider):
            return (
                f"Instance {instance.name} exists already in this project, and the job's VMs "
                f"are named {name}-1, {name}-2, ...: choose another name."
            )
    return ""


def vm_name_promised(project: Project, name: str) -> str:
    """Why an instance may not be named so: it is the name a job of the project (not deleted)
    gives one of its VMs, <job>-<n>, when it registers them; "" otherwise."""
    job_name, _, number = name.rpartition("-")
    if not (job_name and number.isdecimal() and int(number) >= 1):
        return ""
    for job in ProvisioningJob.objects.filter(project=project, name=job_name).exclude(
        status=JobStatus.DELETED
    ):
        if int(number) <= _vm_names_count(InfraConfig.from_json(job.config)):
            return (
                f"Job {job.name} names its VMs {job.name}-1, {job.name}-2, ...: choose another "
                "name."
            )
    return ""


def _vm_names_count(config: InfraConfig) -> int:
    """How many VM names a job may use: its pool's largest size."""
    return max(config.vm_count, config.asg_max if config.pool_mode == PoolMode.ASG else 0)


def space_register(*, job: ProvisioningJob, config: InfraConfig, vms: list[dict[str, str]]) -> str:
    """Add (or refresh) one instance row per VM, named <job name>-<n>, on the backend named
    for the job's cloud ("aws", "gcp")."""
    backend = job.provider
    vcpus, memory = machine_size(job.provider, config.instance_type)
    described = {vm["instance_id"]: vm for vm in vms}
    with transaction.atomic():
        for number, vm in enumerate(config.vms, start=1):
            facts = described.get(vm.instance_id, {})
            vm.private_ip = facts.get("private_ip", vm.private_ip)
            vm.zone = facts.get("zone", vm.zone)
            running = facts.get("state") == "running"
            instance = Instance.objects.filter(pk=vm.console_instance_id or 0).first()
            if instance is None:
                instance, created = Instance.objects.get_or_create(
                    project=job.project,
                    name=f"{job.name}-{number}",
                    defaults={
                        "zone": vm.zone[:32] or job.region,
                        "backend": backend,
                        "host": f"{backend}:{job.region}",
                        "vcpus": vcpus,
                        "memory_gb": memory,
                    },
                )
                if not created and not _adoptable(instance, job.provider, job):
                    raise CloudError(
                        f"Project {job.project.slug} already has an instance named "
                        f"{instance.name}: rename it, or create the job under another name."
                    )
            instance.power_state = PowerState.RUNNING if running else PowerState.STOPPED
            # The page shows the cloud's id, address and job from the backend's facts; the
            # power message is for what went wrong.
            instance.power_message = ""
            instance.state_changed_at = timezone.now()
            instance.stop_refusal = stop_refusal(job)
            instance.start_refusal = ""  # a VM the job (re)made runs again
            instance.save(
                update_fields=[
                    "power_state",
                    "power_message",
                    "state_changed_at",
                    "stop_refusal",
                    "start_refusal",
                ]
            )
            vm.console_instance_id = instance.pk
            JobInstance.objects.update_or_create(instance=instance, defaults={"job": job})
        config.space = {
            "registered_at": timezone.now().isoformat(timespec="seconds"),
            "instances": [vm.console_instance_id for vm in config.vms],
            "region": job.region,
            "exec_mode": config.exec_mode,
            "load_balancer": config.resources.get("load_balancer_dns", ""),
            "dns_name": config.dns_name if config.load_balancer else "",
        }
    count = len(config.vms)
    return f"Registered {count} instance{pluralize(count)} in project {job.project.slug}."


def _adoptable(instance: Instance, provider: str, job: ProvisioningJob | None = None) -> bool:
    """An instance row of this name may stand for a VM of the job (None: of a new job): one of
    its cloud that no other live job holds (one this job registered before, whose config lost
    the id in a failed attempt)."""
    if instance.backend != provider:
        return False
    link = JobInstance.objects.filter(instance=instance).select_related("job").first()
    return (
        link is None
        or (job is not None and link.job_id == job.pk)
        or link.job.status == JobStatus.DELETED
    )


def space_unregister(*, job: ProvisioningJob, config: InfraConfig) -> None:
    """The VMs are gone: remove their instance rows (and with them their links to the job)."""
    ids = [vm.console_instance_id for vm in config.vms if vm.console_instance_id]
    Instance.objects.filter(pk__in=ids, project=job.project, backend=job.provider).delete()
    for vm in config.vms:
        vm.console_instance_id = None
    config.space = {}
