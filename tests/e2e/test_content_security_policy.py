"""The pages work under the Content-Security-Policy: every main page, its htmx swaps, the admin
and the API docs load in Chromium without one violation (the `page` fixture fails on any)."""

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.e2e.session import log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]
TABS = ("storage", "networking", "events", "overview")


def test_the_main_pages_and_their_swaps_keep_to_the_policy(page, project, owner, running):
    log_in(page, "owner")
    base = f"/projects/{project.slug}"
    pages = [
        "/", f"{base}/", f"{base}/events/", f"{base}/instances/", f"{base}/subnets/",
        f"{base}/ssh-keys/", f"{base}/images/", f"{base}/provisioning/",
        f"{base}/provisioning/new/", f"{base}/provisioning/accounts/",
    ]  # fmt: skip
    for path in pages:
        response = page.goto(path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
    page.goto(f"{base}/instances/{running.pk}/")
    for tab in TABS:  # swapped in by htmx
        page.click(f"nav.tabs a[href$='?tab={tab}']")
        expect(page).to_have_url(re.compile(rf"\?tab={tab}$"))
    page.goto(f"{base}/instances/new/")
    page.click("button[value=disks]")  # htmx adds a row, with the formset's count
    expect(page.locator("#disks-rows .form-row")).to_have_count(1)
    page.click("button[value=nics]")
    expect(page.locator("#nics-rows .row-title").last).to_have_text("eth1")  # instance_form.js
    assert page.csp_violations == []


def test_the_admin_and_the_api_docs_keep_to_the_policy(page, project, running):
    get_user_model().objects.create_superuser("root", password="correct-horse-battery")
    log_in(page, "root")
    for path in ("/admin/", "/admin/instances/instance/", f"/admin/instances/instance/{running.pk}/change/",
                 "/api/v1/docs"):  # fmt: skip
        assert page.goto(path).status == 200, path
    expect(page.locator("#swagger-ui .info")).to_be_visible()
    assert page.csp_violations == []
