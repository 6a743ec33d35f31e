"""Power operations on GCE VMs through a real Celery worker: the worker calls the Compute Engine
fake over HTTP with google-cloud-compute, and the instance, the VM's GCE status and the job's
per-VM lifecycle state follow."""

import pytest
from google.cloud import compute_v1

from instances import actions
from instances.choices import PowerState, Role
from instances.services import power
from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.services.vms import job_vms_refresh
from tests.provisioning.gcp import compute
from tests.provisioning.vms import (
    POWER_CYCLE,
    audit_trail,
    instances_of,
    settled,
    vm_states,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def landed(cloud_queue, make_gcp_job):
    """A Fixed job of two VMs, run to ready by the worker."""
    job = make_gcp_job(instance_count=2)
    wait_for(
        lambda: (
            ProvisioningJob.objects.get(pk=job.pk).status
            not in (JobStatus.PENDING, JobStatus.PROVISIONING)
        ),
        "the job to land",
    )
    job.refresh_from_db()
    assert job.status == JobStatus.READY, job.message
    return job


def gce_status(gcp, name):
    return gcp.state()["instances"][name]["status"]


def test_the_services_stop_start_reset_and_force_stop_a_vm_through_gce(gcp, landed, operator):
    first, _ = instances_of(landed)
    first_id, second_id = (vm.instance_id for vm in InfraConfig.from_json(landed.config).vms)
    assert (first.power_state, first.backend) == (PowerState.RUNNING, "gcp")

    power.instance_shutdown(instance=first, actor=operator)
    settled(first, PowerState.STOPPED)
    assert (gce_status(gcp, first_id), vm_states(landed)[first_id]) == ("TERMINATED", "stopped")
    assert (gce_status(gcp, second_id), vm_states(landed)[second_id]) == ("RUNNING", "ready")

    power.instance_start(instance=first, actor=operator)
    settled(first, PowerState.RUNNING)
    assert (gce_status(gcp, first_id), vm_states(landed)[first_id]) == ("RUNNING", "ready")

    power.instance_restart(instance=first, actor=operator)
    settled(first, PowerState.RUNNING)
    wait_for(lambda: gcp.state()["instances"][first_id]["resets"] == 1, "GCE to reset the VM")

    power.instance_force_stop(instance=first, actor=operator)
    settled(first, PowerState.STOPPED)
    assert gce_status(gcp, first_id) == "TERMINATED"
    assert first.power_message == ""
    assert audit_trail(first) == POWER_CYCLE


def test_the_instance_page_shows_the_vm_and_the_iap_shell_command(landed, client_for):
    first, _ = instances_of(landed)
    vm = InfraConfig.from_json(landed.config).vms[0]
    html = client_for("viewer").get(f"/projects/alpha/instances/{first.pk}/").content.decode()
    assert f'GCE instance: <span class="mono">{vm.instance_id}</span>' in html
    assert f'Zone: <span class="mono">{vm.zone}</span>' in html
    command = (
        f"gcloud compute ssh {vm.instance_id} --zone {vm.zone} --project zopday-sandbox "
        "--tunnel-through-iap"
    )
    assert f'Shell (OS Login, as your Google identity): <span class="mono">{command}</span>' in html
    # the console pages say which channel instead, and refuse
    refused = actions.console(first, Role.VIEWER)
    assert not refused and "IAM-gated exec channel (OS Login)" in refused.reason


def test_a_vm_deleted_outside_the_console_is_failed_with_the_reason(gcp, landed, api_for):
    first, second = instances_of(landed)
    first_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    zone = InfraConfig.from_json(landed.config).vms[0].zone
    # Someone deletes the VM in Google's console; the periodic refresh reads it back.
    compute(gcp, compute_v1.InstancesClient).delete(
        project="zopday-sandbox", zone=zone, instance=first_id
    )
    wait_for(lambda: first_id not in gcp.state()["instances"], "GCE to delete the VM")
    assert job_vms_refresh(job=landed) == [first_id]
    first.refresh_from_db()
    assert first.power_state == PowerState.FAILED
    assert first.power_message.startswith(
        f"GCE has no instance {first_id} in us-central1 any more: it was terminated outside"
    )
    assert vm_states(landed)[first_id] == "terminated"
    second.refresh_from_db()
    assert second.power_state == PowerState.RUNNING

    # A start is never a way back: it is refused with the reason.
    response = api_for("operator").post(f"/projects/alpha/instances/{first.pk}/start")
    assert response.status_code == 409
    assert "terminated outside the console and cannot run again" in response.json()["detail"]
