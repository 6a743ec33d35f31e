"""Helpers of the tests of provisioned VMs: their instances, their EC2 and lifecycle states."""

from instances.models import Instance
from provisioning.infra import InfraConfig
from tests.provisioning.moto import raw_client


def instances_of(job):
    """The job's VMs as the console's instances, by name."""
    return list(Instance.objects.filter(project=job.project, backend="aws").order_by("name"))


def ec2_state(aws, instance_id):
    """What moto's EC2 says of the VM: running, stopped, terminated..."""
    ec2 = raw_client(aws, "ec2")
    [reservation] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservation["Instances"][0]["State"]["Name"]


def vm_states(job):
    """The lifecycle state the job records for each VM, by EC2 id."""
    job.refresh_from_db()
    return {vm.instance_id: vm.state for vm in InfraConfig.from_json(job.config).vms}
