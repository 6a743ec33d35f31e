import json

import pytest
from django.urls import reverse

from provisioning.choices import JobStatus
from provisioning.models import CloudAccount, ProvisioningJob

pytestmark = pytest.mark.django_db


def test_a_live_job_is_not_deleted_in_the_admin(admin_client, make_job):
    job = make_job()
    url = reverse("admin:provisioning_provisioningjob_delete", args=[job.pk])

    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert ProvisioningJob.objects.filter(pk=job.pk).exists()
    change = admin_client.get(reverse("admin:provisioning_provisioningjob_change", args=[job.pk]))
    assert b'class="deletelink"' not in change.content


def test_jobs_are_not_deleted_in_bulk(admin_client, make_job):
    job = make_job()
    ProvisioningJob.objects.filter(pk=job.pk).update(status=JobStatus.DELETED)
    changelist = reverse("admin:provisioning_provisioningjob_changelist")

    assert b"delete_selected" not in admin_client.get(changelist).content
    admin_client.post(changelist, {"action": "delete_selected", "_selected_action": [job.pk]})
    assert ProvisioningJob.objects.filter(pk=job.pk).exists()


def test_the_record_of_a_torn_down_job_can_be_deleted(admin_client, make_job):
    job = make_job()
    ProvisioningJob.objects.filter(pk=job.pk).update(status=JobStatus.DELETED)
    url = reverse("admin:provisioning_provisioningjob_delete", args=[job.pk])

    assert admin_client.get(url).status_code == 200
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not ProvisioningJob.objects.filter(pk=job.pk).exists()


def test_a_gcp_account_added_in_the_admin_has_its_key_checked_and_never_shown(
    admin_client, project, gcp
):
    from tests.fakes.gce import service_account_key

    key = service_account_key(gcp, email="ops@zopday-sandbox.iam.gserviceaccount.com")
    data = {"project": project.pk, "provider": "gcp", "name": "GCP", "default_region": "us-central1",
            "gcp_project": "zopday-sandbox", "new_secret_access_key": "{not json"}  # fmt: skip
    page = admin_client.post("/admin/provisioning/cloudaccount/add/", data)
    assert page.status_code == 200
    assert "Paste the service account key as downloaded: a JSON document." in page.content.decode()
    response = admin_client.post(
        "/admin/provisioning/cloudaccount/add/", {**data, "new_secret_access_key": json.dumps(key)}
    )
    assert response.status_code == 302
    account = CloudAccount.objects.get(name="GCP")
    assert account.access_key_id == "ops@zopday-sandbox.iam.gserviceaccount.com"
    assert json.loads(account.secret_access_key)["private_key_id"] == key["private_key_id"]
    change = admin_client.get(f"/admin/provisioning/cloudaccount/{account.pk}/change/")
    assert key["private_key_id"] not in change.content.decode()
