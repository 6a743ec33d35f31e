"""An instance on a cluster, end to end in a real browser: created with the form on the fake
KubeVirt cluster, started, typed into through its serial console (the VMI's `console`
subresource, through `manage.py consoleproxy`), shut down."""

import pytest
from playwright.sync_api import expect

from instances.choices import LastExit, PowerState
from instances.models import Instance
from tests.e2e.test_consoles import (
    logged_in_page,
    type_line,
    wait_for_text,
)
from tests.factories import demo_image
from tests.fakes.kubevirt.fixtures import wait_for_prompt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]

BOOT_TIMEOUT = 180_000  # ms


def test_create_a_kubevirt_instance_start_it_type_on_its_serial_console_shut_it_down(
    browser,
    live_server,
    console_proxy_port,
    kube_api,
    kubevirt,
    cluster,
    watching,
    cluster_lan,
    operator,
):
    demo_image("Demo guest")
    page = logged_in_page(browser, live_server, "operator")
    page.goto("/projects/alpha/instances/new/")
    page.fill("#id_name", "kv-web")
    page.select_option("#id_cluster", label="Cluster lab (KubeVirt)")
    page.select_option("#id_zone", "zone-a")
    page.select_option("#id_nics-0-subnet", label="lan (10.91.0.0/24)")
    page.fill("#id_nics-0-ipv4", "10.91.0.50")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("h1")).to_contain_text("kv-web")
    instance = Instance.objects.get(name="kv-web")
    assert (instance.backend, instance.cluster, instance.host) == ("kubevirt", cluster, "")

    badge = page.locator("#power-panel .badge.state")
    page.click("button[data-action=start]")
    expect(badge).to_have_text("Running", timeout=BOOT_TIMEOUT)
    page.click("[data-testid=options-menu] summary")
    page.click("[data-console=serial]")
    expect(page.get_by_test_id("console-status")).to_have_text("Connected")
    wait_for_prompt(kubevirt, instance)  # KubeVirt keeps no serial log: the boot went by unseen
    type_line(page, "echo zop-$((6*7)) $(hostname)")
    wait_for_text(page, r"(?m)^zop-42 kv-web\s*$", timeout=60)

    page.goto(f"/projects/alpha/instances/{instance.pk}/")
    page.click("button[data-action=shutdown]")
    expect(badge).to_have_text("Stopped", timeout=90_000)
    instance.refresh_from_db()
    assert (instance.power_state, instance.last_exit) == (PowerState.STOPPED, LastExit.REQUESTED)
    vm = next(
        body for key, body in kube_api.store.objects.items()
        if key[0].kind == "VirtualMachine" and key[2] == instance.machine_id
    )  # fmt: skip
    assert vm["status"]["printableStatus"] == "Stopped"
