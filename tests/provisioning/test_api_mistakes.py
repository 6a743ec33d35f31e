"""A job request with mistakes of several layers gets all of them at once, at their fields;
no job is made and none is changed."""

import pytest

from provisioning.models import ProvisioningJob

pytestmark = pytest.mark.django_db


def body(**fields):
    return {"project": "alpha", "account": 9999, "name": "api", **fields}


def test_a_bad_provider_and_account_hide_none_of_the_other_mistakes(api_for, account):
    response = api_for("operator").post(
        "/provisioning-jobs",
        body(provider="nowhere", name="Bad Name", instance_count="two", disk_gb=1),
    )
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) == {"provider", "account", "name", "instance_count", "disk_gb"}
    assert errors["provider"] == ["Choose aws or gcp."]
    assert errors["account"] == ["Choose a cloud account of this project."]
    assert errors["instance_count"] == [
        "Input should be a valid integer, unable to parse string as an integer"
    ]
    assert not ProvisioningJob.objects.exists()


def test_a_missing_account_comes_with_the_clouds_own_mistakes(api_for, account):
    response = api_for("operator").post(
        "/provisioning-jobs", body(region="mars", instance_type="huge", load_balancer="maybe")
    )
    assert response.status_code == 422
    assert set(response.json()["errors"]) == {
        "account", "region", "instance_type", "load_balancer",
    }  # fmt: skip
    assert not ProvisioningJob.objects.exists()


def test_an_account_on_another_cloud_is_told_with_the_rest(api_for, account):
    response = api_for("operator").post(
        "/provisioning-jobs", body(account=account.pk, provider="gcp", vpc_cidr="10.0.0.0/8")
    )
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert errors["account"] == [f"The account {account.name} is not on gcp."]
    assert "vpc_cidr" in errors
    assert not ProvisioningJob.objects.exists()


def test_a_taken_name_is_told_with_the_other_mistakes(api_for, account, make_job):
    make_job(name="api")
    response = api_for("operator").post("/provisioning-jobs", body(account=account.pk, disk_gb=1))
    assert response.status_code == 422
    assert set(response.json()["errors"]) == {"name", "disk_gb"}
    assert ProvisioningJob.objects.count() == 1


def test_a_change_reports_an_unknown_vm_op_with_a_port_off_the_schema(api_for, make_job):
    job = make_job()
    response = api_for("operator").patch(
        f"/provisioning-jobs/{job.pk}", {"vmOp": "resize", "health_check_port": "http"}
    )
    assert response.status_code == 422
    assert set(response.json()["errors"]) == {"vmOp", "health_check_port"}
    assert ProvisioningJob.objects.get(pk=job.pk).config == job.config
