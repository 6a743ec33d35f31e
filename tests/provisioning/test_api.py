import re

import pytest
from django.test import Client

from provisioning.choices import JobStatus
from provisioning.models import ProvisioningJob
from provisioning.pipeline import job_run_inline
from tests.instances.api.helpers import Api
from tests.provisioning.moto import raw_client
from tests.provisioning.wizard import WIZARD, url, walk

pytestmark = pytest.mark.django_db


def body(account, **fields):
    return {"project": "alpha", "account": account.pk, "name": "api", **fields}


def test_an_operator_creates_a_job_with_its_eleven_steps(api_for, account):
    response = api_for("operator").post("/provisioning-jobs", body(account, load_balancer=True))
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["status"] == "pending" and job["region"] == "us-east-1"
    assert len(job["steps"]) == 11 and job["steps"][0]["name"] == "stepValidate"


def test_a_viewer_may_not_create_a_job_and_an_outsider_sees_no_project(api_for, account):
    assert api_for("viewer").post("/provisioning-jobs", body(account)).status_code == 403
    assert api_for("outsider").post("/provisioning-jobs", body(account)).status_code == 404


def test_anonymous_callers_are_401(account):
    assert Api(Client()).get("/provisioning-jobs").status_code == 401


def test_invalid_choices_are_422_with_field_errors(api_for, account):
    response = api_for("operator").post(
        "/provisioning-jobs",
        body(account, name="Bad Name", pool_mode="ASG", asg_min=3, asg_desired=1, asg_max=2,
             instance_type="x9.huge", load_balancer=True, health_check_path="healthz"),
    )  # fmt: skip
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) >= {"name", "asg_max", "instance_type", "health_check_path"}


def test_a_name_taken_by_a_job_or_by_the_instances_its_vms_would_be_is_refused(
    api_for, account, make_job, operator, subnet
):
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    make_job("web")
    api = api_for("operator")
    response = api.post("/provisioning-jobs", body(account, name="web"))
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "name": ["Job web exists already in this project: choose another name."]
    }
    instance_create(
        project=account.project, actor=operator, request=instance_request(subnet, name="db-2")
    )
    response = api.post("/provisioning-jobs", body(account, name="db", instance_count=2))
    assert response.json()["errors"] == {
        "name": [
            "Instance db-2 exists already in this project, and the job's VMs are named db-1, "
            "db-2, ...: choose another name."
        ]
    }
    assert api.post("/provisioning-jobs", body(account, name="db")).status_code == 201  # db-1


def test_azure_answers_the_clean_invalid_stub(api_for, account):
    response = api_for("operator").post("/provisioning-jobs", body(account, provider="azure"))
    assert response.status_code == 422
    assert response.json()["errors"]["provider"][0].startswith(
        "Invalid: Azure VMSS provisioning is in preview, not yet GA"
    )


def test_jobs_are_listed_per_member_and_hidden_from_outsiders(api_for, account, make_job):
    job = make_job()
    assert [j["id"] for j in api_for("viewer").get("/provisioning-jobs").json()] == [job.pk]
    assert api_for("outsider").get("/provisioning-jobs").json() == []
    assert api_for("viewer").get(f"/provisioning-jobs/{job.pk}").status_code == 200
    assert api_for("outsider").get(f"/provisioning-jobs/{job.pk}").status_code == 404


def test_jobs_are_filtered_by_status_and_project(api_for, make_job):
    pending, failed = make_job("web"), make_job("db")
    ProvisioningJob.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    viewer = api_for("viewer")

    def ids(query):
        return sorted(j["id"] for j in viewer.get(f"/provisioning-jobs?{query}").json())

    assert ids("status=failed") == [failed.pk]
    assert ids("status=pending&project=alpha") == [pending.pk]
    assert ids("status=") == ids("") == sorted([pending.pk, failed.pk])
    assert ids("status=bogus") == []


def test_an_unknown_vm_op_is_422_naming_the_allowed_values(api_for, make_job):
    job = make_job()
    response = api_for("operator").patch(f"/provisioning-jobs/{job.pk}", {"vmOp": "resize"})
    assert response.status_code == 422 and set(response.json()["errors"]) == {"vmOp"}
    assert "attach_lb, detach_lb" in response.json()["detail"]


def test_attach_and_detach_lb_keep_the_instances(aws, api_for, make_job):
    job = job_run_inline(make_job(instance_count=2).pk)
    before = sorted(vm["instance_id"] for vm in job.config["vms"])
    operator = api_for("operator")
    assert (
        api_for("viewer").patch(f"/provisioning-jobs/{job.pk}", {"vmOp": "attach_lb"}).status_code
        == 403
    )
    response = operator.patch(f"/provisioning-jobs/{job.pk}", {"vmOp": "attach_lb"})
    assert response.status_code == 202, response.content
    assert [s["name"] for s in response.json()["steps"][7:]] == [
        "stepCreateLoadBalancer", "stepCreateTargetGroup", "stepCreateListener", "stepCreateDNSRecord",
    ]  # fmt: skip
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.READY, job.message
    elbv2 = raw_client(aws, "elbv2")
    [group] = elbv2.describe_target_groups()["TargetGroups"]
    targets = elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
    assert sorted(t["Target"]["Id"] for t in targets["TargetHealthDescriptions"]) == before
    assert operator.patch(f"/provisioning-jobs/{job.pk}", {"vmOp": "attach_lb"}).status_code == 409

    assert operator.patch(f"/provisioning-jobs/{job.pk}", {"vmOp": "detach_lb"}).status_code == 202
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.READY, job.message
    assert elbv2.describe_load_balancers()["LoadBalancers"] == []
    assert elbv2.describe_target_groups()["TargetGroups"] == []
    assert sorted(vm["instance_id"] for vm in job.config["vms"]) == before
    ec2 = raw_client(aws, "ec2")
    running = [i["InstanceId"] for r in ec2.describe_instances(InstanceIds=before)["Reservations"]
               for i in r["Instances"] if i["State"]["Name"] == "running"]  # fmt: skip
    assert sorted(running) == before


def test_delete_is_for_admins_and_tears_everything_down(aws, api_for, make_job):
    from tests.provisioning.moto import tagged_resources

    job = job_run_inline(make_job(load_balancer=True, dns_name="www.example.org").pk)
    assert api_for("operator").delete(f"/provisioning-jobs/{job.pk}").status_code == 403
    response = api_for("owner").delete(f"/provisioning-jobs/{job.pk}")
    assert response.status_code == 202
    assert response.json()["status"] == "tearing_down"
    assert [s["name"] for s in response.json()["steps"][11:]] == [
        "stepDetachLoadBalancer", "stepTerminateVMs", "stepDeleteLaunchTemplate",
        "stepDeleteSecurityGroup", "stepDeleteIAM", "stepDeleteNetwork",
    ]  # fmt: skip
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}
    assert api_for("owner").delete(f"/provisioning-jobs/{job.pk}").status_code == 409


def test_an_asg_job_tears_down_to_nothing(aws, make_job, owner):
    from provisioning.services.jobs import job_teardown
    from tests.provisioning.moto import tagged_resources

    job = job_run_inline(make_job(pool_mode="ASG", asg_max=2, asg_desired=2, load_balancer=True).pk)
    assert job.status == JobStatus.READY, job.message
    job_teardown(job=job, actor=owner)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}
    assert job.steps.get(name="stepTerminateVMs").log[0]["line"].endswith("min = max = desired = 0")


def test_retry_and_cancel_follow_the_rules(api_for, make_job, owner):
    job = make_job()
    assert api_for("operator").post(f"/provisioning-jobs/{job.pk}/retry").status_code == 409
    assert api_for("viewer").post(f"/provisioning-jobs/{job.pk}/cancel").status_code == 403
    response = api_for("operator").post(f"/provisioning-jobs/{job.pk}/cancel")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert {s["status"] for s in response.json()["steps"]} == {"cancelled"}


@pytest.mark.parametrize("misspelt", [{"count": 3}, {"pool_mode": "ASG", "min": 2, "max": 5}])
def test_it_refuses_a_field_it_does_not_know_and_makes_nothing(api_for, account, misspelt):
    response = api_for("operator").post("/provisioning-jobs", body(account, **misspelt))
    assert response.status_code == 422, response.content
    unknown = set(misspelt) - {"pool_mode"}
    assert set(response.json()["errors"]) == unknown
    assert "This field is unknown here" in response.json()["errors"][next(iter(unknown))][0]
    assert not ProvisioningJob.objects.exists()


def test_a_change_with_a_field_it_does_not_know_is_refused(api_for, make_job):
    job = make_job()
    response = api_for("operator").patch(f"/provisioning-jobs/{job.pk}", {"health_path": "/up"})
    errors = response.json()["errors"]  # with the fields a change is given in
    assert response.status_code == 422 and set(errors) == {"health_path", "vmOp"}


def test_an_asg_min_above_its_max_is_told_at_the_max(api_for, account):
    response = api_for("operator").post(
        "/provisioning-jobs", body(account, pool_mode="ASG", asg_min=3, asg_max=2, asg_desired=2)
    )
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "asg_max": ["The group's max must be at least its min (3)."]
    }


@pytest.mark.parametrize(
    ("sizes", "field", "message"),
    [
        ({"instance_count": -1}, "instance_count", "A fixed pool has 1 to 20 instances."),
        ({"pool_mode": "ASG", "asg_min": -1}, "asg_min", "The group's min is 0 to 50."),
        ({"pool_mode": "ASG", "asg_desired": -2}, "asg_desired", "Start at least one instance."),
    ],
)
def test_a_negative_size_gets_one_message(api_for, client_for, account, sizes, field, message):
    response = api_for("operator").post("/provisioning-jobs", body(account, **sizes))
    assert response.json()["errors"] == {field: [message]}
    client = client_for("operator")
    walk(client, account, until="pool")
    pool = {**dict(WIZARD)["pool"], **{name: str(value) for name, value in sizes.items()}}
    page = client.post(url("pool"), {**pool, "action": "next"}).content.decode()
    assert re.findall(r'<p class="error"[^>]*>(.*?)</p>', page) == [message.replace("'", "&#x27;")]


INJECTION = "/h{}location~.{alias/etc/;}#"


@pytest.mark.parametrize(
    "path", [INJECTION, "/up;", "/a b", "/x'y", '/x"y', "/a$b", "/a?b", "/%zz", "/a\\b"]
)
@pytest.mark.parametrize("load_balancer", [True, False])
def test_a_health_check_path_that_is_not_a_url_path_is_refused_at_its_field(
    api_for, account, path, load_balancer
):
    response = api_for("operator").post(
        "/provisioning-jobs", body(account, load_balancer=load_balancer, health_check_path=path)
    )
    assert response.status_code == 422, response.content
    assert set(response.json()["errors"]) == {"health_check_path"}
    assert not ProvisioningJob.objects.exists()


def test_the_wizard_refuses_the_nginx_injection_at_the_path(client_for, account):
    client = client_for("operator")
    walk(client, account, until="load-balancer")
    step = {**dict(WIZARD)["load-balancer"], "health_check_path": INJECTION, "action": "next"}
    page = client.post(url("load-balancer"), step).content.decode()
    assert 'id="health_check_path-error">The health check path is a URL path' in page
