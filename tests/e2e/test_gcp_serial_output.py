"""A GCP VM's page shows what its guest prints on the serial port, live, without a reload."""

import json

import pytest
from playwright.sync_api import expect

from provisioning.choices import JobStatus
from provisioning.clouds.gcp.sdk import forget_clients
from provisioning.infra import InfraConfig
from provisioning.pipeline import job_run_inline
from provisioning.services.accounts import account_create
from provisioning.services.jobs import job_create
from tests.fakes.gce import service_account_key
from tests.provisioning.vms import instances_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


@pytest.fixture
def gcp_vm(gce, project, owner):
    """One GCP VM landed by a job against the fake: its console instance and its GCE name."""
    forget_clients()
    key = service_account_key(gce, email="zopday@zopday-sandbox.iam.gserviceaccount.com")
    account = account_create(
        project=project, actor=None, name="Sandbox GCP", provider="gcp",
        default_region="us-central1", service_account_key=json.dumps(key), endpoint_url=gce.url,
    )  # fmt: skip
    config = InfraConfig(provider="gcp", region="us-central1", instance_type="e2-small",
                         exec_mode="OSConfig", instance_count=1)  # fmt: skip
    job = job_create(project=project, account=account, actor=owner, name="web", config=config)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.READY, job.message
    [instance] = instances_of(job)
    yield instance, InfraConfig.from_json(job.config).vms[0].instance_id
    forget_clients()


def test_a_line_the_guest_prints_appears_without_a_reload(
    page, login, project, viewer, gce, gcp_vm
):
    instance, name = gcp_vm
    login("viewer")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/")
    output = page.locator("#serial-text")
    expect(output).to_contain_text(f"{name} login:")
    expect(page.get_by_test_id("shell-command")).to_contain_text(f"gcloud compute ssh {name}")
    gce.append_serial(name, "zop-42 <b>not bold</b>\r\n")
    expect(output).to_contain_text("zop-42 <b>not bold</b>", timeout=10_000)
    assert output.locator("b").count() == 0  # the guest's text, never markup
    assert output.inner_text().count("login:") == 1  # each poll appends only what is new
