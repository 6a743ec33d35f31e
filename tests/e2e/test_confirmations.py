"""Destructive actions ask first in a real browser: on a page when scripts are off, and in place
of the page when a form from before the question posts without its answer."""

import re

import pytest
from playwright.sync_api import expect

from instances.choices import PowerState

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

FORCE_STOP = "Force Shutdown cuts the power at once: unsaved data in the guest is lost. Continue?"


def test_without_scripts_force_shutdown_is_asked_on_a_page(scriptless_page, project, running):
    page = scriptless_page
    page.goto(f"/projects/{project.slug}/instances/{running.pk}/")
    page.click("button[data-action=force_stop]")
    expect(page.get_by_text(FORCE_STOP)).to_be_visible()
    page.get_by_role("link", name="Cancel").click()
    expect(page.locator("#power-panel .badge.state")).to_have_text("Running")
    running.refresh_from_db()
    assert running.power_state == PowerState.RUNNING

    page.click("button[data-action=force_stop]")
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#power-panel .badge.state")).to_have_text(re.compile("Stopping|Stopped"))


def test_a_form_from_before_the_question_gets_it_in_place_of_the_page(
    page, login, project, running
):
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{running.pk}/")
    page.locator("form:has(button[data-action=force_stop])").evaluate(
        "form => { form.removeAttribute('hx-vals'); form.removeAttribute('hx-confirm') }"
    )
    page.click("button[data-action=force_stop]")
    expect(page.get_by_text(FORCE_STOP)).to_be_visible()
    expect(page).to_have_title("Confirm · ZopDay")
    running.refresh_from_db()
    assert running.power_state == PowerState.RUNNING
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#power-panel .badge.state")).to_have_text(re.compile("Stopping|Stopped"))
