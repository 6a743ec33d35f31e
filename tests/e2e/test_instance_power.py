"""The main front door end to end: create an instance with the form, start it, see it Running,
shut it down, see it Stopped; a real guest under QEMU behind a real Celery worker."""

import pytest
from playwright.sync_api import expect

from instances.models import Instance
from tests.factories import demo_image

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]

BOOT_TIMEOUT = 120_000  # ms


def test_create_start_see_running_shut_down_see_stopped(
    page, login, project, operator, subnet, celery_worker_process
):
    demo_image("Demo guest")
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "browser-vm")
    page.fill("#id_nics-0-ipv4", "10.20.0.50")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("h1")).to_contain_text("browser-vm")
    badge = page.locator("#power-panel .badge.state")
    expect(badge).to_have_text("Stopped")

    page.click("button[data-action=start]")
    expect(badge).to_have_text("Running", timeout=BOOT_TIMEOUT)  # polled, no reload
    expect(page.locator("button[data-action=shutdown]")).to_be_enabled()

    page.click("button[data-action=shutdown]")
    expect(badge).to_have_text("Stopped", timeout=60_000)
    expect(page.locator("#power-panel")).to_contain_text("Stopped on request")
    assert Instance.objects.get(name="browser-vm").power_state == "stopped"
