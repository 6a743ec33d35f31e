"""Pages left open show what changed elsewhere (another user, the reconciler, a guest powering
itself off) without a reload, and a settled page that polls keeps what the user has open."""

import pytest
from playwright.sync_api import expect

from instances.choices import LastExit, PowerState
from instances.models import Instance
from instances.services.instances import instance_create
from tests.factories import instance_request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

POLL = 8_000  # ms: a settled part polls every 5 s


def test_the_details_page_shows_a_stop_made_elsewhere_and_keeps_its_menu_open(
    page, login, project, running
):
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{running.pk}/")
    badge = page.locator("#power-panel .badge.state")
    expect(badge).to_have_text("Running")
    page.click("[data-testid=options-menu] summary")

    with page.expect_response(lambda r: "/power/?seen=" in r.url, timeout=POLL) as polled:
        pass
    assert polled.value.status == 204  # nothing changed: nothing swapped
    expect(page.locator("[data-testid=options-menu]")).to_have_attribute("open", "")

    Instance.objects.filter(pk=running.pk).update(
        power_state=PowerState.STOPPED, last_exit=LastExit.GUEST_POWEROFF
    )
    expect(badge).to_have_text("Stopped", timeout=POLL)
    expect(page.locator("#power-panel")).to_contain_text("Guest powered off")
    expect(page.locator("button[data-action=start]")).to_be_enabled()


def test_the_instance_list_shows_new_instances_and_changed_states(
    page, login, project, operator, subnet, running
):
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/?q=web")
    row = page.locator(f"#instance-{running.pk}")
    expect(row.locator(".badge.state")).to_have_text("Running")

    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.FAILED)
    added = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="web-2")
    )

    expect(row.locator(".badge.state")).to_have_text("Failed", timeout=POLL)
    expect(page.locator(f"#instance-{added.pk}")).to_contain_text("web-2")
    assert page.locator("#instance-table").count() == 1  # swapped in place, not nested
    assert "q=web" in page.url  # the filter holds


def test_the_job_page_shows_a_stop_schedule_set_elsewhere(page, login, project, owner, operator):
    from provisioning.choices import JobStatus
    from provisioning.infra import InfraConfig
    from provisioning.models import CloudAccount, ProvisioningJob
    from provisioning.schedules import SCHEDULES, WEEKNIGHTS_AND_WEEKENDS
    from provisioning.services.jobs import job_schedule_set

    account = CloudAccount.objects.create(project=project, name="sandbox")
    job = ProvisioningJob.objects.create(
        project=project, account=account, name="web", region="us-east-1",
        config=InfraConfig().to_json(), status=JobStatus.READY, created_by=owner,
    )  # fmt: skip
    login("operator")
    page.goto(f"/projects/{project.slug}/provisioning/jobs/{job.pk}/")
    said = page.locator("#schedule p").first
    expect(said).to_contain_text(SCHEDULES[""])

    job_schedule_set(job=job, actor=owner, schedule=WEEKNIGHTS_AND_WEEKENDS, tz="Europe/Paris")
    expect(said).to_contain_text(
        f"{SCHEDULES[WEEKNIGHTS_AND_WEEKENDS]} (Europe/Paris)", timeout=POLL
    )
    expect(page.locator("#schedule-schedule_tz")).to_have_value("Europe/Paris")
    assert page.locator("#job-settings").count() == 1  # swapped in place, not added
