"""The provisioning wizard in a real browser, from the provider choice to a ready job on the
sandbox account (moto), with a real Celery worker running the steps and the page updating live."""

import os
import time

import pytest
from playwright.sync_api import expect

from provisioning.services.accounts import account_create
from tests.provisioning.moto import start_moto
from tests.provisioning.proxy import SlowProxy
from tests.services import start_celery_worker_on, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def sandbox(project, tmp_path, settings):
    """moto behind a proxy that holds RunInstances for 2 s, so a running step can be seen."""
    process, url = start_moto(tmp_path / "moto.log")
    proxy = SlowProxy(url, hold=b"Action=RunInstances", seconds=2)
    queue = f"provisioning-e2e-{os.getpid()}-{time.monotonic_ns()}"
    settings.ZOPDAY_PROVISIONING_QUEUE = queue
    worker = start_celery_worker_on(
        tmp_path / "worker.log", queue,
        {"ZOPDAY_PROVISIONING_QUEUE": queue, "ZOPDAY_PROVISIONING_POLL_SECONDS": "0.1"},
    )  # fmt: skip
    account = account_create(
        project=project, actor=None, name="Sandbox AWS", access_key_id="sandbox",
        secret_access_key="sandbox", endpoint_url=proxy.url, sandbox=True,
    )  # fmt: skip
    yield account
    stop(worker)
    proxy.close()
    stop(process)


def test_the_wizard_takes_a_job_from_provider_to_ready_with_live_steps(
    page, login, project, operator, sandbox
):
    login("operator")
    page.goto(f"/projects/{project.slug}/provisioning/")
    page.click("text=New VM environment")
    page.fill("#id_name", "shop")
    page.check("input[name=provider][value=azure]")
    page.click("button:has-text('Next')")
    expect(page.locator(".error")).to_contain_text("Invalid: Azure VMSS provisioning is in preview")
    page.check("input[name=provider][value=aws]")
    page.click("button:has-text('Next')")
    expect(page.locator("[aria-current=step]")).to_have_text("Region and pool")
    page.fill("#id_instance_count", "2")
    page.click("button:has-text('Next')")
    expect(page.locator("[aria-current=step]")).to_have_text("Machines")
    page.click("button:has-text('Back')")
    expect(page.locator("#id_instance_count")).to_have_value("2")
    expect(page.locator("[aria-current=step]")).to_have_text("Region and pool")
    page.click("button:has-text('Next')")
    expect(page.locator("[aria-current=step]")).to_have_text("Machines")
    page.click("button:has-text('Next')")  # machines: defaults
    expect(page.locator("[aria-current=step]")).to_have_text("Network")
    page.click("button:has-text('Next')")  # network: a new VPC
    expect(page.locator("[aria-current=step]")).to_have_text("Load balancer")
    page.check("#id_load_balancer")
    page.fill("#id_dns_name", "shop.example.com")
    page.click("button:has-text('Next')")
    expect(page.locator("[aria-current=step]")).to_have_text("Review")
    expect(page.locator("#step-count")).to_have_text("11")
    expect(page.locator("#cost-total")).to_contain_text("$")
    page.click("button:has-text('Create environment')")

    page.wait_for_url("**/provisioning/jobs/*/")
    # live: the page shows stepCreateVMs running after stepValidate has succeeded, without reload
    expect(page.locator("tr[data-step=stepCreateVMs][data-status=running]")).to_be_visible(
        timeout=30_000
    )
    expect(page.locator("tr[data-step=stepValidate][data-status=succeeded]")).to_be_visible()
    expect(page.locator("#job-status")).to_have_attribute("data-status", "ready", timeout=60_000)
    expect(page.locator("tr[data-status=succeeded]")).to_have_count(11)
    expect(page.locator("#vms tbody tr")).to_have_count(2)
    expect(page.get_by_role("button", name="Detach load balancer")).to_be_visible()


def test_enter_in_a_field_goes_forward_and_back_stays_on_the_left(wizard_second_step):
    page = wizard_second_step
    expect(page.locator("[aria-current=step]")).to_have_text("Region and pool")
    back, forward = page.locator("button[value=back]"), page.locator("button[value=next]")
    assert back.bounding_box()["x"] < forward.bounding_box()["x"]  # Back shows on the left
    page.fill("#id_instance_count", "2")
    page.press("#id_instance_count", "Enter")
    expect(page.locator("[aria-current=step]")).to_have_text("Machines")
    page.click("button:has-text('Back')")  # the button still says which way it goes
    expect(page.locator("[aria-current=step]")).to_have_text("Region and pool")
    expect(page.locator("#id_instance_count")).to_have_value("2")
    for field, lands_on in [("#id_region", "Machines"), ("#id_disk_gb", "Network"),
                            ("#id_vpc_cidr", "Load balancer"), ("#id_dns_name", "Review")]:  # fmt: skip
        page.press(field, "Enter")
        expect(page.locator("[aria-current=step]")).to_have_text(lands_on)
    back, create = page.locator("button[value=back]"), page.locator("button[value=create]")
    assert back.bounding_box()["x"] < create.bounding_box()["x"]
