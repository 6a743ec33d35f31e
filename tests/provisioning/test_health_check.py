"""Changing a landed job's load balancer health check, through the API and the job's page,
against moto: the target group checks the new path and port, and the VMs' security group lets
the load balancer reach that port. The VMs are not touched."""

import pytest

from instances.models import AuditEvent
from provisioning.choices import JobStatus, Phase
from provisioning.models import ProvisioningJob
from provisioning.pipeline import job_run_inline
from provisioning.services.jobs import job_vm_op
from provisioning.services.vms import job_vms_refresh
from tests.provisioning.moto import raw_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def landed(aws, make_job):
    job = job_run_inline(make_job(instance_count=1, load_balancer=True).pk)
    assert job.status == JobStatus.READY, job.message
    return job


def target_group(aws):
    [group] = raw_client(aws, "elbv2").describe_target_groups()["TargetGroups"]
    return group


def ports_open_to_the_lb(aws, job) -> set[int]:
    ec2 = raw_client(aws, "ec2")
    resources = job.config["resources"]
    [group] = ec2.describe_security_groups(GroupIds=[resources["security_group"]])["SecurityGroups"]
    return {
        rule["FromPort"]
        for rule in group["IpPermissions"]
        if any(p["GroupId"] == resources["lb_security_group"] for p in rule["UserIdGroupPairs"])
    }


def test_the_api_changes_the_health_check_in_place(aws, api_for, landed):
    vms = [vm["instance_id"] for vm in landed.config["vms"]]
    url = f"/provisioning-jobs/{landed.pk}"
    assert api_for("viewer").patch(url, {"health_check_path": "/up"}).status_code == 403

    response = api_for("operator").patch(
        url, {"health_check_path": "/up", "health_check_port": 8080}
    )
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "updating"
    assert response.json()["steps"][-1]["name"] == "stepUpdateHealthCheck"
    job = job_run_inline(landed.pk)
    assert job.status == JobStatus.READY, job.message

    group = target_group(aws)
    assert (group["HealthCheckPath"], group["HealthCheckPort"]) == ("/up", "8080")
    assert ports_open_to_the_lb(aws, job) == {80, 8080}
    assert (job.config["health_check_path"], job.config["health_check_port"]) == ("/up", 8080)
    assert [vm["instance_id"] for vm in job.config["vms"]] == vms
    event = AuditEvent.objects.get(action="provisioning.health_check")
    assert event.message == "GET /up on 8080"

    # what is not given stays as it is
    assert api_for("operator").patch(url, {"health_check_port": 9090}).status_code == 202
    job = job_run_inline(landed.pk)
    assert job.status == JobStatus.READY, job.message
    group = target_group(aws)
    assert (group["HealthCheckPath"], group["HealthCheckPort"]) == ("/up", "9090")
    job.refresh_from_db()
    assert ports_open_to_the_lb(aws, job) == {80, 9090}  # the traffic port, and the check's

    # a load balancer attached again sends requests where the service is, and checks there
    for op in ("detach_lb", "attach_lb"):
        assert api_for("operator").patch(url, {"vmOp": op}).status_code == 202
        job = job_run_inline(landed.pk)
        assert job.status == JobStatus.READY, job.message
    group = target_group(aws)
    assert (group["Port"], group["HealthCheckPort"], group["HealthCheckPath"]) == (
        80,
        "9090",
        "/up",
    )
    assert ports_open_to_the_lb(aws, job) == {80, 9090}


def test_a_bad_health_check_is_refused_at_its_fields_and_changes_nothing(aws, api_for, landed):
    url = f"/provisioning-jobs/{landed.pk}"
    api = api_for("operator")
    response = api.patch(url, {"health_check_path": "up now", "health_check_port": 70000})
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "health_check_path": [
            "The health check path is a URL path: it starts with / and has letters, digits, "
            "- . _ ~ ! * + , = : @ / and %XX escapes only (e.g. /healthz)."
        ],
        "health_check_port": ["A port is 1 to 65535."],
    }
    assert api.patch(url, {"health_check_path": "/santé"}).status_code == 422
    injection = api.patch(url, {"health_check_path": "/h{}location~.{alias/etc/;}#"})
    assert injection.status_code == 422 and set(injection.json()["errors"]) == {"health_check_path"}
    both = api.patch(url, {"vmOp": "detach_lb", "health_check_port": 8080})
    assert both.status_code == 422 and set(both.json()["errors"]) == {"vmOp", "health_check_port"}
    nothing = api.patch(url, {})
    assert nothing.status_code == 422
    assert (
        "Give vmOp (attach_lb, detach_lb), health_check_path and/or health_check_port, or schedule"
        in nothing.json()["detail"]
    )
    landed.refresh_from_db()
    assert landed.status == JobStatus.READY and landed.config["health_check_path"] == "/healthz"
    assert target_group(aws)["HealthCheckPath"] == "/healthz"


def test_a_change_the_cloud_refused_is_corrected_by_another(aws, api_for, landed):
    ProvisioningJob.objects.filter(pk=landed.pk).update(
        status=JobStatus.FAILED, phase=Phase.HEALTH_CHECK
    )
    url = f"/provisioning-jobs/{landed.pk}"
    assert api_for("operator").patch(url, {"health_check_path": "/ok"}).status_code == 202
    assert job_run_inline(landed.pk).status == JobStatus.READY
    ProvisioningJob.objects.filter(pk=landed.pk).update(status=JobStatus.FAILED, phase="provision")
    refused = api_for("operator").patch(url, {"health_check_path": "/ok"})
    assert refused.status_code == 409  # a failed provisioning is retried, not changed


def test_a_job_without_a_load_balancer_has_no_health_check_to_change(aws, api_for, make_job):
    job = job_run_inline(make_job(instance_count=1).pk)
    response = api_for("operator").patch(
        f"/provisioning-jobs/{job.pk}", {"health_check_path": "/up"}
    )
    assert response.status_code == 409
    assert response.json()["detail"] == "The job has no load balancer."


def test_the_job_page_changes_the_health_check_with_mistakes_at_their_fields(
    aws, client_for, landed
):
    page = f"/projects/alpha/provisioning/jobs/{landed.pk}/"
    action = page + "health_check/"
    assert "Change health check" not in client_for("viewer").get(page).text
    assert "Needs the operator role." in client_for("viewer").get(page).text
    client = client_for("operator")
    html = client.get(page).text
    assert 'GET /healthz</span> to port <span class="mono">80</span>' in html

    wrong = client.post(action, {"health_check_path": "healthz", "health_check_port": "0"})
    assert wrong.status_code == 200
    assert 'id="health_check_path-error">The health check path is a URL path' in wrong.text
    assert 'id="health_check_port-error">Ensure this value is greater than or equal to 1.' in (
        wrong.text
    )
    assert 'value="healthz"' in wrong.text

    done = client.post(action, {"health_check_path": "/ready", "health_check_port": "80"})
    assert done.status_code == 302
    job = job_run_inline(landed.pk)
    assert job.status == JobStatus.READY, job.message
    assert target_group(aws)["HealthCheckPath"] == "/ready"
    assert "GET /ready</span>" in client.get(page).text


def test_the_refresh_records_what_the_load_balancer_says_of_each_vm(aws, client_for, landed):
    [vm] = landed.config["vms"]
    job_vms_refresh(job=landed)
    landed.refresh_from_db()
    assert (landed.config["vms"][0]["lb_health"], landed.config["vms"][0]["lb_health_reason"]) == (
        "healthy",
        "",
    )
    raw_client(aws, "ec2").stop_instances(InstanceIds=[vm["instance_id"]])
    job_vms_refresh(job=landed)
    landed.refresh_from_db()
    recorded = landed.config["vms"][0]
    assert (recorded["lb_health"], recorded["lb_health_reason"]) == (
        "unused",
        "Target is in the stopped state",
    )
    page = client_for("viewer").get(f"/projects/alpha/provisioning/jobs/{landed.pk}/").text
    assert '<span class="badge lb-unused">unused</span>' in page
    assert "Target is in the stopped state" in page
    instance = f"/projects/alpha/instances/{vm['console_instance_id']}/"
    assert 'Load balancer target: <span class="mono">unused (Target is in the stopped state)' in (
        client_for("viewer").get(instance).text
    )

    job = job_run_inline(job_vm_op(job=landed, actor=landed.created_by, op="detach_lb").pk)
    assert job.status == JobStatus.READY, job.message
    job_vms_refresh(job=job)
    job.refresh_from_db()
    assert job.config["vms"][0]["lb_health"] == ""


def test_a_target_group_that_cannot_be_read_does_not_stop_the_vm_refresh(aws, landed, caplog):
    [vm] = landed.config["vms"]
    config = landed.config
    config["resources"]["target_group"] += "-gone"  # deleted outside the console, say
    ProvisioningJob.objects.filter(pk=landed.pk).update(config=config)
    landed.refresh_from_db()
    raw_client(aws, "ec2").stop_instances(InstanceIds=[vm["instance_id"]])
    job_vms_refresh(job=landed)
    landed.refresh_from_db()
    assert landed.config["vms"][0]["state"] == "stopped"
    assert f"reading the target health of job {landed.pk}" in caplog.text
