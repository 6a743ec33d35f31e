"""The create form and the details page in a real browser (no hypervisor needed here)."""

import re

import pytest
from playwright.sync_api import expect

from instances.choices import PowerState, SnapshotState
from instances.models import AuditEvent, DiskSnapshot, Instance
from instances.services.instances import instance_create
from tests.factories import ImageFactory, instance_request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_a_validation_error_is_shown_at_its_field_and_input_is_kept(
    page, login, project, operator, subnet
):
    ImageFactory(name="Demo guest")
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "web-7")
    page.select_option("#id_vcpus", "2")
    page.click("summary:has-text('CPU topology')")
    for field, value in (("sockets", "1"), ("cores", "1"), ("threads", "1")):
        page.fill(f"#id_{field}", value)
    expect(page.get_by_test_id("topology-preview")).to_have_text(
        "1 socket(s) × 1 core(s) × 1 thread(s) = 1 vCPU (needs 2)"
    )
    page.fill("#id_nics-0-mac", "52-54-00-12-34-56")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("#sockets-error")).to_have_text(
        "sockets × cores × threads is 1 × 1 × 1 = 1, but the instance has 2 vCPU."
    )
    expect(page.locator("#id_name")).to_have_value("web-7")
    assert not Instance.objects.exists()

    page.fill("#id_sockets", "")
    page.fill("#id_cores", "")
    page.fill("#id_threads", "")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("#nics-0-mac-error")).to_have_text(
        "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
    )
    page.fill("#id_nics-0-mac", "52:54:00:12:34:56")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("h1")).to_contain_text("web-7")
    assert Instance.objects.get(name="web-7").nics.get().mac == "52:54:00:12:34:56"


def test_add_interface_adds_a_named_row_that_submits(page, login, project, operator, subnet):
    from tests.factories import SubnetFactory

    SubnetFactory(project=project, name="storage", cidr_v4="10.21.0.0/24", gateway="10.21.0.1")
    ImageFactory(name="Demo guest")
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "two-nics")
    page.click("button:has-text('Add interface')")
    expect(page.locator("#nics-rows .row-title")).to_have_text(["eth0 ★ primary", "eth1"])
    page.select_option("#id_nics-1-subnet", label="storage (10.21.0.0/24)")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("h1")).to_contain_text("two-nics")
    assert [n.subnet.name for n in Instance.objects.get().nics.order_by("index")] == [
        "backend",
        "storage",
    ]


def dismiss_next_dialog(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The page's next confirm() is dismissed; its message lands in the list returned."""
    messages: list[str] = []

    def dismiss(dialog):  # type: ignore[no-untyped-def]
        messages.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    return messages


def test_force_shutdown_asks_for_confirmation_first(page, login, project, operator, subnet):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/")
    messages = dismiss_next_dialog(page)
    page.click("button[data-action=force_stop]")
    page.wait_for_timeout(300)
    assert messages and messages[0].startswith("Force Shutdown cuts the power at once")
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING  # dismissed: nothing was sent

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=force_stop]")
    expect(page.locator("#power-panel .badge.state")).to_have_text(re.compile("Stopping|Stopped"))
    instance.refresh_from_db()
    assert instance.power_state in (PowerState.STOPPING, PowerState.STOPPED)


def test_reverting_a_disk_to_a_snapshot_asks_for_confirmation_first(
    page, login, project, operator, subnet
):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    disk = instance.disks.get()
    DiskSnapshot.objects.create(disk=disk, name="nightly", state=SnapshotState.READY)
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/?tab=storage")
    messages = dismiss_next_dialog(page)
    page.get_by_label(f"Revert {disk.name} to nightly").click()
    page.wait_for_timeout(300)
    assert messages == [
        f"Reverting {disk.name} to nightly discards everything written to it since the "
        "snapshot. Continue?"
    ]
    asked = AuditEvent.objects.filter(action="disk.snapshot_revert", actor=operator)
    assert not asked.exists()

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_label(f"Revert {disk.name} to nightly").click()
    expect(page.get_by_text("Revert requested.")).to_be_visible()
    assert asked.count() == 1  # (a worker of this run may have tried it since, on no machine)


def test_a_snapshot_being_taken_shows_up_taken_without_a_reload(
    page, login, project, operator, subnet
):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    snapshot = DiskSnapshot.objects.create(disk=instance.disks.get(), name="nightly")
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/?tab=storage")
    cell = page.locator("[data-snapshot=nightly]")
    expect(cell).to_contain_text("(taking…)")
    DiskSnapshot.objects.filter(pk=snapshot.pk).update(state=SnapshotState.READY, consistent=True)
    expect(cell).to_contain_text("(frozen)")
    expect(cell.get_by_role("button", name="Delete snapshot nightly")).to_be_visible()


def test_taking_the_primary_link_down_asks_first(page, login, project, operator, subnet):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/?tab=networking")
    messages = dismiss_next_dialog(page)
    page.get_by_role("button", name="Link down").click()
    page.wait_for_timeout(300)
    assert messages == [
        "eth0 is the primary interface: taking its link down can cut the instance off the "
        "network. Continue?"
    ]
    assert instance.nics.get().link_desired == "up"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Link down").click()
    expect(page.get_by_role("button", name="Link up")).to_be_visible()
    assert instance.nics.get().link_desired == "down"


def test_the_list_filters_as_the_search_box_changes_pasted_text_too(
    page, login, project, operator, subnet
):
    for name in ("web-1", "db-1"):
        instance_create(
            project=project, actor=operator, request=instance_request(subnet, name=name)
        )
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/")
    rows = page.locator("#instance-table tbody tr")
    expect(rows).to_have_count(2)
    page.fill("input[name=q]", "db")  # one input event, no key pressed: as a paste
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("db-1")


def test_attaching_to_a_subnet_shows_a_mistake_at_its_field_and_then_attaches(
    page, login, project, operator, subnet
):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{instance.pk}/?tab=networking")
    form = page.locator("#nic-add")
    form.get_by_label("Static IPv4").fill("10.99.0.5")
    form.get_by_label("Static MAC").fill("52:54:00:00:00:42")
    form.get_by_role("button", name="Add interface").click()
    expect(page.locator("#nic-add #ipv4-error")).to_have_text(
        "10.99.0.5 is outside subnet backend (10.20.0.0/24)."
    )
    expect(page.locator("#nic-add").get_by_label("Static MAC")).to_have_value("52:54:00:00:00:42")
    assert instance.nics.count() == 1

    page.locator("#nic-add").get_by_label("Static IPv4").fill("10.20.0.42")
    page.locator("#nic-add").get_by_role("button", name="Add interface").click()
    expect(
        page.get_by_text("Interface added; it appears in the guest at the next start.")
    ).to_be_visible()
    expect(page.locator("tr[data-nic=eth1]")).to_contain_text("10.20.0.42")
    page.get_by_role("navigation", name="Instance").get_by_role("link", name="Overview").click()
    expect(page.locator("section.tab[data-tab=overview]")).to_contain_text("eth1")


def test_without_javascript_add_disk_and_add_interface_add_rows_and_keep_the_input(
    scriptless_page, project, subnet
):
    ImageFactory(name="Demo guest")
    page = scriptless_page
    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "no-script")
    page.get_by_role("button", name="Add disk").click()
    page.get_by_role("button", name="Add interface").click()
    expect(page.locator("#disks-rows .form-row")).to_have_count(1)
    expect(page.locator("#nics-rows .form-row")).to_have_count(2)
    expect(page.locator("#id_name")).to_have_value("no-script")
    expect(page.locator("p.error")).to_have_count(0)  # nothing is checked before it is sent
    page.fill("#id_disks-0-size_gb", "2")
    page.get_by_role("button", name="Create instance").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    instance = Instance.objects.get(name="no-script")
    assert sorted(instance.disks.values_list("role", "size_gb")) == [("root", 1), ("secondary", 2)]
    assert instance.nics.count() == 2


def test_enter_in_a_field_creates_the_instance_rather_than_adding_a_row(
    page, login, project, operator, subnet
):
    ImageFactory(name="Demo guest")
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "by-enter")
    page.press("#id_name", "Enter")
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    assert Instance.objects.get(name="by-enter").disks.count() == 1
