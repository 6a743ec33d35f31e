"""Helpers of the tests of provisioned VMs: their instances, their EC2 and lifecycle states."""

import time

from instances.models import AuditEvent, Instance
from provisioning.infra import InfraConfig
from tests.provisioning.moto import raw_client


def instances_of(job):
    """The job's VMs as the console's instances, by name."""
    return list(Instance.objects.filter(project=job.project, backend=job.provider).order_by("name"))


def first_vm_of_landed_job(project, account, owner):
    """A new job's first VM once the job is Ready: run here, or by a Celery worker that an
    earlier test left serving the queue (then its steps are that worker's)."""
    from provisioning.choices import JobStatus
    from provisioning.pipeline import job_run_inline
    from provisioning.services.jobs import job_create

    job = job_create(
        project=project, account=account, actor=owner, name="web", config=InfraConfig()
    )
    job_run_inline(job.pk)

    def landed():
        job.refresh_from_db()
        assert job.status not in (JobStatus.FAILED, JobStatus.CANCELLED), job.message
        return job.status == JobStatus.READY

    wait_for(landed, "the job to land")
    return instances_of(job)[0]


def ec2_state(aws, instance_id):
    """What moto's EC2 says of the VM: running, stopped, terminated..."""
    ec2 = raw_client(aws, "ec2")
    [reservation] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservation["Instances"][0]["State"]["Name"]


def audit_trail(instance):
    """The instance's audit events as (action, outcome), oldest first."""
    events = AuditEvent.objects.filter(target_type="instance", target_id=str(instance.pk))
    return list(events.order_by("pk").values_list("action", "outcome"))


POWER_CYCLE = [
    ("instance.shutdown", "success"), ("instance.start", "success"),
    ("instance.restart", "success"), ("instance.force_stop", "success"),
]  # fmt: skip


def vm_states(job):
    """The lifecycle state the job records for each VM, by EC2 id."""
    job.refresh_from_db()
    return {vm.instance_id: vm.state for vm in InfraConfig.from_json(job.config).vms}


def wait_for(predicate, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def settled(instance, state):
    """Wait until the instance shows the power state (the worker has run its operation)."""

    def reached():
        instance.refresh_from_db()
        return instance.power_state == state

    wait_for(reached, f"{instance.name} to be {state}")
    return instance
