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
