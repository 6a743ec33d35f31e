"""The instance pages through Django's test client: access, the create form, the details page."""

import html
import re

import pytest
from django.conf import settings
from django.urls import reverse

from instances.choices import ImageKind, PowerState, SnapshotState, UserDataMode
from instances.models import AuditEvent, Disk, DiskSnapshot, Instance
from instances.services import network
from instances.services.instances import instance_create
from instances.services.keys import ssh_key_add
from tests.factories import ImageFactory, SubnetFactory, instance_request

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi ops@desk"

pytestmark = pytest.mark.django_db

EXPECTED = {"owner": 200, "operator": 200, "viewer": 200, "outsider": 404}


@pytest.fixture
def instance(project, operator, subnet):
    return instance_create(project=project, actor=operator, request=instance_request(subnet))


def page_urls(project, instance):
    base = [project.slug]
    return [
        reverse("instance-list", args=base),
        reverse("subnet-list", args=base),
        reverse("ssh-key-list", args=base),
        reverse("image-list", args=base),
        *[reverse("instance-detail", args=[*base, instance.pk]) + f"?tab={tab}"
          for tab in ("overview", "storage", "networking", "user-data", "events")],
        reverse("instance-row", args=[*base, instance.pk]),
        reverse("instance-power-panel", args=[*base, instance.pk]),
    ]  # fmt: skip


@pytest.mark.parametrize("role", EXPECTED)
def test_every_instance_page_answers_each_role(client_for, project, instance, role):
    client = client_for(role)
    # 286 is htmx's "stop polling": the list row of an instance that is not changing
    answers = {404} if role == "outsider" else {200, 286}
    for url in page_urls(project, instance):
        assert client.get(url).status_code in answers, url


def test_lists_show_only_the_projects_own_objects(
    client_for, operator, project, subnet, instance, other_project, outsider
):
    theirs = SubnetFactory(project=other_project, name="their-lan", cidr_v4="10.60.0.0/24")
    instance_create(
        project=other_project,
        actor=outsider,
        request=instance_request(theirs, name="their-vm", image=ImageFactory(name="their-image")),
    )
    ImageFactory(project=other_project, name="their-own-image")
    ImageFactory(project=project, name="our-image")
    client = client_for("operator")
    pages = {
        "instance-list": ("web-1", "their-vm"),
        "subnet-list": ("backend", "their-lan"),
        "image-list": ("our-image", "their-own-image"),
    }
    for page, (ours, theirs_name) in pages.items():
        text = client.get(reverse(page, args=[project.slug])).text
        assert ours in text and theirs_name not in text, page


@pytest.mark.parametrize(
    ("role", "status"), [("owner", 200), ("operator", 200), ("viewer", 403), ("outsider", 404)]
)
def test_the_create_form_needs_the_operator_role(client_for, project, subnet, role, status):
    assert client_for(role).get(reverse("instance-new", args=[project.slug])).status_code == status


def form_data(subnet, image, **overrides):
    data = {
        "name": "app-1", "zone": "local-1a", "run_strategy": "Manual", "vcpus": "2", "memory_gb": "2",
        "root_image": str(image.pk), "root_size_gb": "1", "root_bus": "auto", "bootloader": "bios",
        "user_data_mode": "default",
        "disks-TOTAL_FORMS": "1", "disks-INITIAL_FORMS": "0", "disks-0-size_gb": "3", "disks-0-bus": "sata",
        "nics-TOTAL_FORMS": "1", "nics-INITIAL_FORMS": "0", "nics-0-subnet": str(subnet.pk), "nics-0-model": "virtio",
    }  # fmt: skip
    data.update(overrides)
    return data


def test_the_create_form_makes_an_instance_and_goes_to_its_page(
    client_for, operator, project, subnet
):
    image = ImageFactory()
    response = client_for("operator").post(
        reverse("instance-new", args=[project.slug]), form_data(subnet, image)
    )
    instance = Instance.objects.get(name="app-1")
    assert response.status_code == 302 and response.url == reverse(
        "instance-detail", args=[project.slug, instance.pk]
    )
    assert sorted(instance.disks.values_list("role", "size_gb", "bus")) == [
        ("root", 1, "auto"),
        ("secondary", 3, "sata"),
    ]


def test_the_create_form_installs_from_a_cdrom_onto_a_blank_root_disk(
    client_for, operator, project, subnet
):
    image = ImageFactory()
    iso = ImageFactory(kind=ImageKind.ISO, name="installer", path="/srv/isos/installer.iso")
    url = reverse("instance-new", args=[project.slug])
    form = client_for("operator").get(url).text
    assert f'<option value="{image.pk}" selected>' in form  # an image, unless blank is chosen
    assert "None: a blank disk, installed from the CD-ROM" in form

    no_cdrom = client_for("operator").post(url, form_data(subnet, image, root_image="")).text
    assert 'id="root_image-error">Choose an image for the root disk, or leave it blank' in no_cdrom
    assert not Instance.objects.exists()

    data = form_data(subnet, image, root_image="", cdrom_image=str(iso.pk), root_size_gb="8")
    assert client_for("operator").post(url, data).status_code == 302
    instance = Instance.objects.get(name="app-1")
    assert sorted(instance.disks.values_list("role", "image__name", "boot_order")) == [
        ("cdrom", "installer", 2), ("root", None, 1), ("secondary", None, None),
    ]  # fmt: skip


def test_the_create_form_boots_a_container_disk_over_a_blank_root_disk(
    client_for, operator, project, subnet
):
    oci = ImageFactory(kind=ImageKind.CONTAINER, name="fedora-oci", path="",
                       reference="registry.example.com/disks/fedora:40")  # fmt: skip
    url = reverse("instance-new", args=[project.slug])
    assert f'<option value="{oci.pk}">fedora-oci</option>' in client_for("operator").get(url).text
    data = form_data(subnet, oci, root_image="", container_image=str(oci.pk))
    assert client_for("operator").post(url, data).status_code == 302
    instance = Instance.objects.get(name="app-1")
    assert sorted(instance.disks.values_list("role", "image__name", "boot_order")) == [
        ("container", "fedora-oci", 1), ("root", None, 2), ("secondary", None, None),
    ]  # fmt: skip


@pytest.mark.parametrize(("kind", "rows"), [("disks", (2, 1)), ("nics", (1, 2))])
def test_add_disk_and_add_interface_work_without_javascript(
    client_for, operator, project, subnet, kind, rows
):
    data = form_data(subnet, ImageFactory(), name="Not_Yet_Valid", add=kind)
    response = client_for("operator").post(reverse("instance-new", args=[project.slug]), data)
    assert response.status_code == 200
    html = response.text
    assert f'name="disks-TOTAL_FORMS" value="{rows[0]}"' in html
    assert f'name="nics-TOTAL_FORMS" value="{rows[1]}"' in html
    assert 'value="Not_Yet_Valid"' in html and 'class="error"' not in html
    assert not Instance.objects.exists()


def test_a_row_added_without_javascript_and_left_alone_is_skipped(
    client_for, operator, project, subnet
):
    url = reverse("instance-new", args=[project.slug])
    data = form_data(subnet, ImageFactory(), add="disks")
    html = client_for("operator").post(url, data).text
    assert 'name="disks-1-size_gb" value="1"' in html  # as the script's new row starts
    assert '<option value="auto" selected>' in html
    sent = {**data, "disks-TOTAL_FORMS": "2", "disks-1-size_gb": "1", "disks-1-bus": "auto"}
    del sent["add"]
    assert client_for("operator").post(url, sent).status_code == 302
    assert Instance.objects.get().disks.count() == 2  # the root disk and the row filled in


def test_a_service_error_is_shown_at_its_field_and_the_input_is_kept(
    client_for, operator, project, subnet
):
    image = ImageFactory()
    data = form_data(subnet, image, **{"nics-0-mac": "52-54-00-aa-bb-cc", "name": "keep-me"})
    response = client_for("operator").post(reverse("instance-new", args=[project.slug]), data)
    assert response.status_code == 200
    text = response.text
    assert (
        'id="nics-0-mac-error">Use colon notation for MAC addresses: 52:54:00:aa:bb:cc, not 52-54-00-aa-bb-cc.'
        in text
    )
    assert 'value="keep-me"' in text and 'value="52-54-00-aa-bb-cc"' in text
    assert not Instance.objects.exists()


def test_every_mistake_of_the_create_form_shows_at_once(client_for, operator, project, subnet):
    data = form_data(
        subnet, ImageFactory(), sockets="1", cores="1", threads="1",
        **{"nics-0-mac": "52-54-00-aa-bb-cc", "nics-0-ipv4": "192.168.5.5"},
    )  # fmt: skip
    text = client_for("operator").post(reverse("instance-new", args=[project.slug]), data).text
    assert 'id="sockets-error">sockets × cores × threads is 1 × 1 × 1 = 1' in text
    assert 'id="nics-0-mac-error">Use colon notation for MAC addresses' in text
    assert 'id="nics-0-ipv4-error">192.168.5.5 is outside subnet backend (10.20.0.0/24).' in text
    assert not Instance.objects.exists()


def test_a_project_without_subnets_is_told_to_create_one(client_for, operator, project, subnet):
    data = form_data(subnet, ImageFactory(), **{"nics-0-subnet": ""})
    subnet.delete()
    text = client_for("operator").post(reverse("instance-new", args=[project.slug]), data).text
    assert (
        'id="nics-0-subnet-error">Choose a subnet (a project without one needs it created first, '
        "on the Subnets page).</p>"
    ) in text


def test_a_topology_error_is_shown_at_the_sockets_field(client_for, operator, project, subnet):
    data = form_data(subnet, ImageFactory(), sockets="1", cores="1", threads="1")
    text = client_for("operator").post(reverse("instance-new", args=[project.slug]), data).text
    assert (
        'id="sockets-error">sockets × cores × threads is 1 × 1 × 1 = 1, but the instance has 2 vCPU.'
        in text
    )


def test_the_add_interface_button_returns_a_numbered_row(client_for, operator, project, subnet):
    response = client_for("operator").get(
        reverse("instance-form-row", args=[project.slug, "nics"]), {"index": "1"}
    )
    assert 'name="nics-1-subnet"' in response.text
    assert (
        'name="nics-TOTAL_FORMS" value="2"' in response.text
        and 'hx-swap-oob="true"' in response.text
    )


def test_a_row_of_an_unknown_kind_is_not_found(client_for, operator, project):
    response = client_for("operator").get(
        reverse("instance-form-row", args=[project.slug, "gpus"]), {"index": "1"}
    )
    assert response.status_code == 404


def test_the_details_page_shows_buttons_from_the_allowed_actions(client_for, instance, project):
    text = (
        client_for("operator")
        .get(reverse("instance-detail", args=[project.slug, instance.pk]))
        .text
    )
    assert 'data-action="start">Start' in text
    assert 'data-action="shutdown" disabled title="The instance is stopped."' in text
    assert "Force Shutdown cuts the power at once" in text
    viewer_text = (
        client_for("viewer").get(reverse("instance-detail", args=[project.slug, instance.pk])).text
    )
    assert 'data-action="start" disabled title="Needs the operator role."' in viewer_text


def test_a_guest_paused_on_a_full_disk_reads_so_with_what_to_do(client_for, instance, project):
    from instances.services.reconciler import DISK_FULL_ADVICE

    Instance.objects.filter(pk=instance.pk).update(
        power_state=PowerState.PAUSED, power_message=DISK_FULL_ADVICE
    )
    text = html.unescape(
        client_for("operator")
        .get(reverse("instance-detail", args=[project.slug, instance.pk]))
        .text
    )
    assert "Paused (disk full)" in text and DISK_FULL_ADVICE in text
    assert 'data-action="resume">Resume' in text
    assert 'data-action="restart" disabled title="The guest is paused on a full disk' in text


def test_power_actions_are_post_only(client_for, instance, project):
    url = reverse("instance-power", args=[project.slug, instance.pk, "start"])
    assert client_for("operator").get(url).status_code == 405
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED


def test_start_with_htmx_returns_the_polling_power_panel(client_for, instance, project):
    url = reverse("instance-power", args=[project.slug, instance.pk, "start"])
    response = client_for("operator").post(url, HTTP_HX_REQUEST="true")
    assert 'id="power-panel"' in response.text and 'hx-trigger="every 1s"' in response.text
    assert 'data-state="starting"' in response.text


def test_a_viewer_pressing_start_gets_the_reason_and_nothing_changes(client_for, instance, project):
    url = reverse("instance-power", args=[project.slug, instance.pk, "start"])
    response = client_for("viewer").post(url, follow=True)
    assert "Needs the operator role." in response.text
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED
    assert AuditEvent.objects.filter(action="instance.start", outcome="denied").exists()


def test_a_settled_power_panel_polls_slowly_and_hears_no_content_until_it_changes(
    client_for, instance, project
):
    url = reverse("instance-power-panel", args=[project.slug, instance.pk])
    client = client_for("viewer")
    response = client.get(url)
    assert response.status_code == 200 and 'hx-trigger="every 5s"' in response.text
    seen = re.search(r'\?seen=(\w+)"', response.text)[1]
    assert client.get(url, {"seen": seen}).status_code == 204

    Instance.objects.filter(pk=instance.pk).update(power_message="The host restarted.")
    response = client.get(url, {"seen": seen})
    assert response.status_code == 200 and "The host restarted." in response.text
    seen = re.search(r'\?seen=(\w+)"', response.text)[1]

    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STARTING)
    response = client.get(url, {"seen": seen})
    assert response.status_code == 200 and 'hx-trigger="every 1s"' in response.text
    assert client.get(url).status_code == 200  # a transitional panel always answers


def test_the_instance_table_polls_with_its_filters_until_a_row_changes(
    client_for, project, running
):
    client = client_for("viewer")
    page = client.get(reverse("instance-list", args=[project.slug]), {"state": "running"})
    poll = html.unescape(re.search(r'<div id="instance-table" hx-get="([^"]+)"', page.text)[1])
    assert "state=running" in poll and "seen=" in poll
    table = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "instance-table"}
    assert client.get(poll, **table).status_code == 204

    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    response = client.get(poll, **table)
    assert response.status_code == 200 and "No instance matches these filters." in response.text
    assert "<html" not in response.text  # the table alone


def test_a_transitional_row_stops_its_own_polling_once_settled(client_for, project, running):
    url = reverse("instance-row", args=[project.slug, running.pk])
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPING)
    assert 'hx-trigger="every 1s"' in client_for("viewer").get(url).text
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    response = client_for("viewer").get(url)
    assert response.status_code == 286 and "hx-trigger" not in response.text


@pytest.mark.parametrize(
    ("role", "reason"),
    [("operator", "Needs the admin role."), ("owner", "Stop the instance before deleting it.")],
)
def test_delete_instance_shows_disabled_with_its_reason(client_for, project, running, role, reason):
    text = client_for(role).get(reverse("instance-detail", args=[project.slug, running.pk])).text
    button = re.search(r'<button class="danger" type="submit" data-action="delete"[^>]*>', text)[0]
    assert "disabled" in button and reason in button
    assert reason in re.search(r'data-testid="delete-reason">([^<]*)<', text)[1]


def test_delete_instance_is_enabled_for_an_admin_once_stopped(client_for, project, instance):
    text = (
        client_for("owner").get(reverse("instance-detail", args=[project.slug, instance.pk])).text
    )
    button = re.search(r'<button class="danger" type="submit" data-action="delete"[^>]*>', text)[0]
    assert "disabled" not in button and "delete-reason" not in text


def test_only_admins_see_the_initial_password(client_for, instance, project):
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=user-data"
    assert instance.initial_password in client_for("owner").get(url).text
    operator_text = client_for("operator").get(url).text
    assert instance.initial_password not in operator_text and "••••••••" in operator_text


def test_the_storage_tab_says_why_detach_is_disabled_while_running(client_for, instance, project):
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    assert (
        "Stop the instance before detaching a persistent disk"
        in client_for("operator").get(url).text
    )


def test_the_storage_tab_shows_each_snapshots_state_and_retries_a_failed_one(
    client_for, instance, project, django_capture_on_commit_callbacks
):
    disk = instance.disks.get()
    DiskSnapshot.objects.create(disk=disk, name="nightly")
    DiskSnapshot.objects.create(
        disk=disk, name="before-upgrade", state=SnapshotState.FAILED, message="No space left."
    )
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    html = " ".join(client_for("operator").get(url).text.split())
    assert 'nightly <small class="muted">(taking…)</small>' in html
    polls = f'hx-get="/projects/alpha/instances/{instance.pk}/?tab=storage"'
    assert f'<td id="snapshots-{disk.pk}" {polls}' in html  # polls till taken
    assert "(failed: No space left.)" in html and 'again">Retry</button>' in html
    assert ">Retry</button>" not in client_for("viewer").get(url).text

    retry = reverse("instance-disk-action", args=[project.slug, instance.pk, "snapshot"])
    with django_capture_on_commit_callbacks() as callbacks:
        client_for("operator").post(retry, {"disk": disk.pk, "name": "before-upgrade"})
    assert len(callbacks) == 1
    retried = DiskSnapshot.objects.get(name="before-upgrade")
    assert (retried.state, retried.message) == (SnapshotState.TAKING, "")


def test_the_storage_tab_acts_only_on_its_own_instances_disks(
    client_for, instance, project, operator, subnet
):
    other = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="db-1")
    )
    theirs = other.disks.get(role="root")
    size = theirs.size_gb
    resize = reverse("instance-disk-action", args=[project.slug, instance.pk, "resize"])
    page = client_for("operator").post(
        resize, {"disk": theirs.pk, "size_gb": size + 1}, follow=True
    )
    assert "Choose a disk of web-1." in html.unescape(page.text)
    theirs.refresh_from_db()
    assert theirs.size_gb == size
    assert not AuditEvent.objects.filter(action="disk.resize").exists()


def test_a_free_disk_is_deleted_from_the_storage_tab_after_a_question(
    client_for, instance, project, operator
):
    from instances.services import storage

    free = storage.disk_create(
        project=project, actor=operator, name="scratch", zone=instance.zone, size_gb=1
    )
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    delete = reverse("instance-disk-action", args=[project.slug, instance.pk, "delete-free"])
    assert f'formaction="{delete}"' in client_for("operator").get(url).text
    asked = client_for("operator").post(delete, {"disk": free.pk})
    assert "Delete scratch? Its data and its snapshots are gone for good." in html.unescape(
        asked.text
    )
    assert Disk.objects.filter(pk=free.pk).exists()
    root = instance.disks.get(role="root")
    page = client_for("operator").post(delete, {"disk": root.pk, "confirm": "1"}, follow=True)
    assert "Choose a free disk." in page.text and Disk.objects.filter(pk=root.pk).exists()
    done = client_for("operator").post(delete, {"disk": free.pk, "confirm": "1"}, follow=True)
    assert "Disk deleted." in done.text and not Disk.objects.filter(pk=free.pk).exists()


def test_every_disk_is_snapshotted_at_once_from_the_storage_tab(
    client_for, instance, project, django_capture_on_commit_callbacks
):
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    assert ">Snapshot all disks</button>" in client_for("operator").get(url).text
    assert ">Snapshot all disks</button>" not in client_for("viewer").get(url).text
    action = reverse("instance-disk-action", args=[project.slug, instance.pk, "snapshot-all"])
    with django_capture_on_commit_callbacks() as callbacks:
        page = client_for("operator").post(action, {"name": "nightly"}, follow=True).text
    assert len(callbacks) == 1 and "Snapshots of every disk requested" in page
    assert DiskSnapshot.objects.get().name == "nightly"
    page = client_for("operator").post(action, {"name": "nightly"}, follow=True).text
    assert "web-1-root already has a snapshot called nightly; it is being taken." in page


def test_a_snapshot_is_deleted_from_the_storage_tab(
    client_for, instance, project, django_capture_on_commit_callbacks
):
    snapshot = DiskSnapshot.objects.create(
        disk=instance.disks.get(), name="nightly", state=SnapshotState.READY
    )
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    assert 'aria-label="Delete snapshot nightly"' in client_for("operator").get(url).text
    delete = reverse("instance-disk-action", args=[project.slug, instance.pk, "delete-snapshot"])
    asked = client_for("operator").post(delete, {"snapshot": snapshot.pk}).text  # no scripts
    assert "Delete snapshot nightly of web-1-root? It cannot be brought back." in asked
    assert f'name="snapshot" value="{snapshot.pk}"' in asked
    assert DiskSnapshot.objects.get().state == SnapshotState.READY
    with django_capture_on_commit_callbacks() as callbacks:
        page = (
            client_for("operator")
            .post(delete, {"snapshot": snapshot.pk, "confirm": "1"}, follow=True)
            .text
        )
    assert len(callbacks) == 1 and "Snapshot deletion requested." in page
    assert 'nightly <small class="muted">(deleting…)</small>' in " ".join(page.split())
    assert DiskSnapshot.objects.get().state == SnapshotState.DELETING
    page = client_for("operator").post(delete, {"snapshot": 0}, follow=True).text
    assert "Choose a snapshot." in page


def test_the_storage_tab_reverts_a_disk_once_stopped(
    client_for, instance, project, django_capture_on_commit_callbacks
):
    disk = instance.disks.get()
    snapshot = DiskSnapshot.objects.create(disk=disk, name="nightly", state=SnapshotState.READY)
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=storage"
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    html = " ".join(client_for("operator").get(url).text.split())
    assert (
        f'aria-label="Revert {disk.name} to nightly" disabled '
        'title="Stop the instance before reverting a disk to a snapshot."'
    ) in html

    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    html = client_for("operator").get(url).text
    assert f'<td id="snapshots-{disk.pk}">' in html  # nothing under way: no polling
    assert f'hx-confirm="Reverting {disk.name} to nightly discards everything' in html
    revert = reverse("instance-disk-action", args=[project.slug, instance.pk, "revert"])
    asked = client_for("operator").post(revert, {"snapshot": snapshot.pk})  # as without scripts
    assert "since the snapshot. Continue?" in asked.text and 'value="1"' in asked.text
    assert DiskSnapshot.objects.get().state == SnapshotState.READY
    with django_capture_on_commit_callbacks() as callbacks:
        page = client_for("operator").post(
            revert, {"snapshot": snapshot.pk, "confirm": "1"}, follow=True
        )
    assert len(callbacks) == 1 and "Revert requested." in page.text


def test_the_primary_link_toggle_asks_for_confirmation(client_for, instance, project):
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=networking"
    assert (
        "eth0 is the primary interface: taking its link down"
        in client_for("operator").get(url).text
    )
    # the dialog adds the confirmation: a browser without scripts posts none, and is asked
    link = reverse("instance-nic-action", args=[project.slug, instance.pk, "link"])
    nic = instance.nics.get(index=0)
    page = client_for("operator").post(link, {"nic": nic.pk, "up": "0"}).text
    assert "taking its link down can cut the instance off the network. Continue?" in page
    assert 'name="confirm_primary" value="1"' in page and 'name="up" value="0"' in page
    nic.refresh_from_db()
    assert nic.link_desired == "up"
    client_for("operator").post(link, {"nic": nic.pk, "up": "0", "confirm_primary": "1"})
    nic.refresh_from_db()
    assert nic.link_desired == "down"


def test_a_disk_action_error_comes_back_as_a_message(client_for, instance, project):
    disk = instance.disks.get()
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "resize"])
    response = client_for("operator").post(url, {"disk": disk.pk, "size_gb": "0"}, follow=True)
    assert "Disks can only grow: enter more than the current 1 GB." in response.text


def test_the_list_filters_and_searches(client_for, instance, project, operator, subnet):
    instance_create(project=project, actor=operator, request=instance_request(subnet, name="db-1"))
    url = reverse("instance-list", args=[project.slug])
    text = client_for("viewer").get(url, {"q": "db"}).text
    assert "db-1" in text and "web-1" not in text
    assert (
        "No instance matches these filters."
        in client_for("viewer").get(url, {"state": "running"}).text
    )
    eip = network.eip_allocate(project=project, actor=operator)
    network.eip_associate(eip=eip, nic=instance.nics.get(index=0), actor=operator)
    text = client_for("viewer").get(url, {"q": eip.address}).text
    assert "web-1" in text and "db-1" not in text


def test_the_empty_list_explains_what_to_do(client_for, project, owner):
    assert (
        "Create the first instance"
        in client_for("owner").get(reverse("instance-list", args=[project.slug])).text
    )


def test_subnet_page_shows_ipam_usage_and_creates_with_field_errors(client_for, instance, project):
    client = client_for("owner")
    url = reverse("subnet-list", args=[project.slug])
    assert "1 of 253 addresses leased" in client.get(url).text
    response = client.post(url, {"name": "x", "zone": "local-1a", "cidr_v4": "10.9.0.7/24"})
    assert (
        'id="cidr_v4-error">10.9.0.7/24 has host bits set; did you mean 10.9.0.0/24?'
        in response.text
    )


def test_a_field_with_an_error_is_marked_invalid_and_described_by_it(client_for, project):
    response = client_for("owner").post(
        reverse("subnet-list", args=[project.slug]),
        {"name": "x", "zone": "local-1a", "cidr_v4": "10.9.0.7/24"},
    )
    field = re.search(r'<input type="text" name="cidr_v4"[^>]*>', response.text)[0]
    assert 'aria-invalid="true"' in field
    assert 'aria-describedby="id_cidr_v4_helptext cidr_v4-error"' in field
    assert '<small class="muted" id="id_cidr_v4_helptext">' in response.text
    assert '<p class="error" id="cidr_v4-error">' in response.text


def test_a_subnet_name_in_use_is_refused_at_its_field(client_for, project, subnet):
    response = client_for("owner").post(
        reverse("subnet-list", args=[project.slug]),
        {"name": subnet.name, "zone": "local-1a", "cidr_v4": "10.98.0.0/24"},
    )
    assert (
        f'id="name-error">A subnet named {subnet.name} already exists in this project'
        in response.text
    )


def test_ssh_key_page_refuses_a_private_key_at_its_field(client_for, project, operator):
    url = reverse("ssh-key-list", args=[project.slug])
    response = client_for("operator").post(
        url, {"name": "k", "public_key": "-----BEGIN OPENSSH PRIVATE KEY----- x"}
    )
    assert 'id="public_key-error">This is a private key.' in response.text


def test_the_networking_tab_states_how_subnets_are_wired(client_for, instance, project, settings):
    from instances.backends import backend_named

    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=networking"
    settings.ZOPDAY_NETWORK_MODE = "user"
    backend_named.cache_clear()
    try:
        assert "uses QEMU user networking" in client_for("viewer").get(url).text
    finally:
        backend_named.cache_clear()


def test_a_new_disk_that_cannot_be_attached_is_not_kept(client_for, instance, project):
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "create"])
    form = {"name": "late-cd", "size_gb": "1", "bus": "auto", "role": "cdrom"}
    response = client_for("operator").post(url, form)

    assert response.status_code == 200
    assert "Only virtio disks are plugged into a running instance" in response.text
    assert not project.disks.filter(name="late-cd").exists()


def test_the_new_disk_form_shows_each_mistake_at_its_field_and_keeps_what_was_typed(
    client_for, instance, project
):
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "create"])
    form = {"name": "", "size_gb": "0", "bus": "sata", "role": "root"}
    html = client_for("operator").post(url, form).text

    assert 'id="name-error">This field is required.' in html
    assert 'id="size_gb-error">Ensure this value is greater than or equal to 1.' in html
    assert 'id="role-error">Select a valid choice. root is not one of the available' in html
    assert '<option value="sata" selected>' in html and 'value="0"' in html
    assert instance.disks.count() == 1
    # the page is at the form's address now: its tabs still lead to the details page
    assert f'href="/projects/alpha/instances/{instance.pk}/?tab=overview"' in html


def test_the_new_disk_form_shows_the_services_mistakes_at_their_fields(
    client_for, instance, project
):
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "create"])
    form = {"name": "data", "size_gb": "99999", "bus": "auto", "role": "secondary"}
    html = client_for("operator").post(url, form).text

    assert 'id="size_gb-error">Disk size must be between 1 and 16384 GB.' in html
    assert 'value="data"' in html and 'value="99999"' in html
    assert instance.disks.count() == 1


def test_the_attach_to_a_subnet_form_shows_each_mistake_at_its_field(
    client_for, instance, project, subnet
):
    url = reverse("instance-nic-action", args=[project.slug, instance.pk, "add"])
    form = {"subnet": subnet.pk, "ipv4": "10.99.0.5", "ipv6": "fd00::5",
            "mac": "52-54-00-12-34-56", "model": "virtio"}  # fmt: skip
    html = client_for("operator").post(url, form).text

    assert 'id="ipv4-error">10.99.0.5 is outside subnet backend (10.20.0.0/24).' in html
    assert 'id="ipv6-error">' in html
    assert (
        'id="mac-error">Use colon notation for MAC addresses: 52:54:00:12:34:56, not '
        "52-54-00-12-34-56." in html
    )
    assert 'value="10.99.0.5"' in html and 'value="52-54-00-12-34-56"' in html
    assert instance.nics.count() == 1


def test_the_attach_to_a_subnet_form_takes_a_static_ipv6(client_for, instance, project):
    dual = SubnetFactory(
        project=project, name="dual", cidr_v4="10.61.0.0/24", cidr_v6="fd00:61::/64"
    )
    url = reverse("instance-nic-action", args=[project.slug, instance.pk, "add"])
    form = {"subnet": dual.pk, "ipv6": "fd00:61::50", "model": "virtio"}
    response = client_for("operator").post(url, form)

    assert response.status_code == 302
    assert instance.nics.get(index=1).ipv6 == "fd00:61::50"


def test_an_elastic_ip_is_not_allocated_for_an_association_that_fails(
    client_for, instance, project
):
    from instances.models import ElasticIP

    client = client_for("operator")
    url = reverse("instance-nic-action", args=[project.slug, instance.pk, "associate-eip"])
    nic = instance.nics.get()
    assert client.post(url, {"nic": nic.pk}).status_code == 302
    assert "already has an Elastic IP" in client.post(url, {"nic": nic.pk}, follow=True).text
    assert "Choose an interface." in client.post(url, {"nic": 999999}, follow=True).text
    assert ElasticIP.objects.count() == 1


@pytest.mark.parametrize(
    ("action", "field", "message"),
    [
        ("disks/attach", "disk", "Choose a disk."),
        ("disks/insert", "image", "Choose an ISO image."),
        ("nics/remove", "nic", "Choose an interface."),
        ("nics/add", "subnet", "Choose a subnet in local-1a."),
        ("nics/release-eip", "eip", "Choose an Elastic IP."),
    ],
)
def test_a_form_naming_no_object_gets_a_message(
    client_for, instance, project, action, field, message
):
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + action + "/"
    for value in ("abc", "²", "999999"):  # no number, a digit int() refuses, no such object
        response = client_for("operator").post(url, {field: value}, follow=True)
        assert response.status_code == 200 and message in response.text


def test_the_list_and_form_rows_answer_bad_query_values_without_an_error(
    client_for, instance, project
):
    client = client_for("operator")
    for value in ("abc", "²"):
        listing = client.get(reverse("instance-list", args=[project.slug]), {"subnet": value})
        assert listing.status_code == 200 and "No instance matches these filters." in listing.text
        row_url = reverse("instance-form-row", args=[project.slug, "disks"])
        row = client.get(row_url, {"index": value})
        assert row.status_code == 400 and "index" in row.text


def test_only_secondary_interfaces_offer_remove(client_for, instance, project, operator, subnet):
    eth1 = network.nic_add(instance=instance, actor=operator, subnet=subnet)
    url = reverse("instance-detail", args=[project.slug, instance.pk]) + "?tab=networking"
    html = client_for("operator").get(url).text
    remove = reverse("instance-nic-action", args=[project.slug, instance.pk, "remove"])
    assert html.count(f'action="{remove}"') == 1
    assert f'name="nic" value="{eth1.pk}"><button>Remove</button>' in html


@pytest.mark.parametrize("mode", ["bridge", "user"])
def test_the_overview_shows_how_to_ssh_to_the_instance(
    client_for, instance, project, monkeypatch, mode
):
    from instances.views import details as views

    monkeypatch.setattr(views, "_network_mode", lambda _: mode)
    url = reverse("instance-detail", args=[project.slug, instance.pk])
    page = client_for("viewer").get(url).text
    address = instance.nics.get(index=0).ipv4
    assert f'<span class="mono">ssh spx@{address}</span>' in page
    through_netns = f"sudo ip netns exec {settings.ZOPDAY_NETNS} ssh spx@{address}"
    assert (through_netns in page) == (mode == "bridge")
    assert ("QEMU user networking (no root)" in page) == (mode == "user")
    assert (
        "with the initial password of spx, which project admins read under Storage &gt; UserData"
        in page
    )


def test_the_overview_says_who_logs_in_over_ssh_and_with_what(
    client_for, instance, project, operator
):
    url = reverse("instance-detail", args=[project.slug, instance.pk])
    address = instance.nics.get(index=0).ipv4
    key = ssh_key_add(project=project, actor=operator, name="desk", public_key=KEY)
    instance.ssh_keys.add(key)
    page = client_for("viewer").get(url).text
    assert (
        f'ssh spx@{address}</span> <span class="muted">with a key selected on the '
        "instance (password logins are off)" in page
    )
    Instance.objects.filter(pk=instance.pk).update(
        user_data_mode=UserDataMode.CUSTOM, custom_user_data="#cloud-config\n"
    )
    page = client_for("viewer").get(url).text
    assert f"ssh USER@{address}</span>" in page
    assert "USER being a user your custom user data creates" in page


def test_the_error_of_a_disks_action_is_shown_at_its_row(client_for, instance, project):
    root = instance.disks.get()
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "detach"])
    page = client_for("operator").post(url, {"disk": root.pk}, follow=True).text
    message = (
        "web-1-root is web-1's root disk, which stays with it: snapshot it, or delete the instance."
    )
    assert f'data-row-error="disk-{root.pk}">{html.escape(message)}</p>' in page
    assert '<ul class="messages">' not in page  # shown at the row, not again at the top
    assert Disk.objects.get(pk=root.pk).instance == instance


def test_the_error_of_a_free_disks_action_is_shown_at_the_free_disks_card(
    client_for, instance, project
):
    far = Disk.objects.create(project=project, zone="local-1b", name="far", size_gb=1)
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "attach"])
    page = client_for("operator").post(url, {"disk": far.pk}, follow=True).text
    assert (
        'data-row-error="free-disks">The disk is in local-1b but the instance is in local-1a'
        in page
    )


def test_the_error_of_an_interfaces_action_is_shown_at_its_row(client_for, instance, project):
    eth0 = instance.nics.get(index=0)
    url = reverse("instance-nic-action", args=[project.slug, instance.pk, "remove"])
    page = client_for("operator").post(url, {"nic": eth0.pk}, follow=True).text
    assert f'data-row-error="nic-{eth0.pk}">eth0 is the primary interface' in page
    assert '<ul class="messages">' not in page
    assert instance.nics.filter(pk=eth0.pk).exists()


def test_an_error_naming_no_row_of_the_tab_is_shown_at_the_top(client_for, instance, project):
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, "detach"])
    page = client_for("operator").post(url, {"disk": 999999}, follow=True).text
    assert '<ul class="messages">' in page and "Choose a disk of web-1." in page
    assert "data-row-error" not in page


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("detach", {}),
        ("resize", {"size_gb": "50"}),
        ("snapshot", {"name": "nightly"}),
        ("eject", {}),
        ("insert", {}),
    ],
)
def test_no_storage_form_acts_on_a_disk_of_another_instance_or_project(
    client_for, instance, project, operator, subnet, other_project, action, data
):
    from instances.services.instances import DiskRequest

    other = instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, name="web-2", disks=[DiskRequest(size_gb=2)]),
    )
    theirs = other.disks.get(role="secondary")
    foreign = Disk.objects.create(project=other_project, zone="local-1a", name="far", size_gb=1)
    if action == "insert":
        data = {"image": ImageFactory(name="installer", kind=ImageKind.ISO).pk}
    url = reverse("instance-disk-action", args=[project.slug, instance.pk, action])
    for disk in (theirs, foreign):
        response = client_for("operator").post(url, {"disk": disk.pk, **data}, follow=True)
        assert response.status_code == 200
        assert "Choose a disk of web-1." in response.text
    assert (Disk.objects.get(pk=theirs.pk).instance, Disk.objects.get(pk=theirs.pk).size_gb) == (
        other,
        2,
    )
    assert not DiskSnapshot.objects.exists()
