"""Helpers of the tests of provisioned VMs: their instances, their EC2 and lifecycle states."""

import time

from instances.models import AuditEvent, Instance
from provisioning.infra import InfraConfig
from tests.provisioning.moto import raw_client


def instances_of(job):
    """The job's VMs as the console's instances, by name."""
    return list(Instance.objects.filter(project=job.project, backend=job.provider).order_by("name"))


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
