"""Power operations on provisioned VMs through a real Celery worker: the services and the API
claim the transition, the worker calls EC2 (moto over HTTP), and the instance, the EC2 state and
the job's per-VM lifecycle state follow."""

import pytest

from instances.choices import PowerState
from instances.models import AuditEvent
from instances.services import power
from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.services.jobs import job_create
from tests.provisioning.moto import raw_client
from tests.provisioning.proxy import SlowProxy
from tests.provisioning.vms import (
    POWER_CYCLE,
    audit_trail,
    ec2_state,
    instances_of,
    settled,
    vm_states,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def landed(cloud_queue, aws, project, account, owner):
    """A Fixed job of two VMs, run to ready by the worker."""
    job = job_create(
        project=project, account=account, actor=owner, name="web",
        config=InfraConfig(instance_count=2),
    )  # fmt: skip
    wait_for(
        lambda: ProvisioningJob.objects.get(pk=job.pk).status not in (JobStatus.PENDING, JobStatus.PROVISIONING),
        "the job to land",
    )  # fmt: skip
    job.refresh_from_db()
    assert job.status == JobStatus.READY, job.message
    return job


def test_the_services_stop_start_reboot_and_force_stop_a_vm_through_ec2(aws, landed, operator):
    first, second = instances_of(landed)
    first_id, second_id = (vm.instance_id for vm in InfraConfig.from_json(landed.config).vms)
    assert first.power_state == PowerState.RUNNING

    power.instance_shutdown(instance=first, actor=operator)
    settled(first, PowerState.STOPPED)
    assert (ec2_state(aws, first_id), vm_states(landed)[first_id]) == ("stopped", "stopped")
    assert (ec2_state(aws, second_id), vm_states(landed)[second_id]) == ("running", "ready")
    second.refresh_from_db()
    assert second.power_state == PowerState.RUNNING

    power.instance_start(instance=first, actor=operator)
    settled(first, PowerState.RUNNING)
    assert (ec2_state(aws, first_id), vm_states(landed)[first_id]) == ("running", "ready")

    # EC2's state does not show a reboot: a proxy in front of moto sees the call.
    proxy = SlowProxy(aws, hold=b"Action=RebootInstances", seconds=0)
    CloudAccount.objects.filter(pk=landed.account_id).update(endpoint_url=proxy.url)
    try:
        power.instance_restart(instance=first, actor=operator)
        assert first.power_state == PowerState.RESTARTING
        settled(first, PowerState.RUNNING)
    finally:
        CloudAccount.objects.filter(pk=landed.account_id).update(endpoint_url=aws)
        proxy.close()
    assert proxy.forwarded.is_set(), "RebootInstances never reached EC2"
    assert (first.power_message, ec2_state(aws, first_id)) == ("", "running")

    power.instance_force_stop(instance=first, actor=operator)
    settled(first, PowerState.STOPPED)
    assert (ec2_state(aws, first_id), vm_states(landed)[first_id]) == ("stopped", "stopped")
    assert first.power_message == ""
    assert audit_trail(first) == POWER_CYCLE


def test_the_api_powers_vms_for_operators_only(aws, landed, api_for, client_for):
    first, _ = instances_of(landed)
    first_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    base = f"/projects/alpha/instances/{first.pk}"
    operator = api_for("operator")

    viewer = api_for("viewer").post(f"{base}/shutdown")
    assert viewer.status_code == 403
    assert api_for("outsider").post(f"{base}/shutdown").status_code == 404
    assert ec2_state(aws, first_id) == "running"

    response = operator.post(f"{base}/shutdown")
    assert (response.status_code, response.json()["power_state"]) == (202, "stopping")
    settled(first, PowerState.STOPPED)
    assert ec2_state(aws, first_id) == "stopped"
    page = client_for("viewer").get(f"{base}/").content.decode()
    assert 'Lifecycle state: <span class="mono">Stopped</span>' in page

    assert api_for("viewer").post(f"{base}/start").status_code == 403
    response = operator.post(f"{base}/start")
    assert (response.status_code, response.json()["power_state"]) == (202, "starting")
    settled(first, PowerState.RUNNING)
    assert (ec2_state(aws, first_id), vm_states(landed)[first_id]) == ("running", "ready")

    assert operator.post(f"{base}/restart").status_code == 202
    settled(first, PowerState.RUNNING)
    assert operator.post(f"{base}/force-stop").status_code == 202
    settled(first, PowerState.STOPPED)
    assert ec2_state(aws, first_id) == "stopped"
    assert operator.get(base).json()["power_state"] == "stopped"


def test_a_vm_terminated_outside_the_console_ends_in_a_clear_message(
    aws, landed, api_for, client_for
):
    first, _ = instances_of(landed)
    first_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    raw_client(aws, "ec2").terminate_instances(InstanceIds=[first_id])
    base = f"/projects/alpha/instances/{first.pk}"

    assert api_for("operator").post(f"{base}/shutdown").status_code == 202
    settled(first, PowerState.FAILED)
    assert first.power_message.startswith(f"EC2 instance {first_id} is terminated")
    assert "terminated outside the console and cannot run again" in first.power_message
    assert vm_states(landed)[first_id] == "terminated"
    assert ec2_state(aws, first_id) == "terminated"  # a stop never brings it back
    page = client_for("operator").get(f"{base}/")
    assert page.status_code == 200
    assert "terminated outside the console" in page.content.decode()

    response = api_for("operator").post(f"{base}/start")
    assert response.status_code == 409 and "cannot run again" in response.json()["detail"]
    assert ec2_state(aws, first_id) == "terminated"
    failure = AuditEvent.objects.filter(
        target_type="instance", target_id=str(first.pk), outcome="failure"
    ).first()
    assert failure is not None and "terminated outside the console" in failure.message
