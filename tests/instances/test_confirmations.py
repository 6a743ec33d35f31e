"""Destructive actions ask first: in htmx's dialog with scripts, on a page without them (or
from a page older than the question), and not at all when the user may not take the action."""

import pytest
from django.urls import reverse

from instances.choices import PowerState, SnapshotState
from instances.models import DiskSnapshot, Instance

pytestmark = pytest.mark.django_db

FORCE_STOP = "Force Shutdown cuts the power at once: unsaved data in the guest is lost. Continue?"


def test_force_shutdown_without_scripts_asks_on_a_page_then_stops(client_for, running, project):
    url = reverse("instance-power", args=[project.slug, running.pk, "force_stop"])
    asked = client_for("operator").post(url)
    assert asked.status_code == 200 and FORCE_STOP in asked.text
    assert f'action="{url}"' in asked.text and 'name="confirm" value="1"' in asked.text
    detail = reverse("instance-detail", args=[project.slug, running.pk])
    assert f'<a href="{detail}">Cancel</a>' in asked.text
    running.refresh_from_db()
    assert running.power_state == PowerState.RUNNING

    assert client_for("operator").post(url, {"confirm": "1"}).status_code == 302
    running.refresh_from_db()
    assert running.power_state == PowerState.STOPPING


def test_the_dialog_sends_its_answer_with_the_form(client_for, running, project):
    page = client_for("operator").get(reverse("instance-detail", args=[project.slug, running.pk]))
    assert f'hx-confirm="{FORCE_STOP}" hx-vals=\'{{"confirm": "1"}}\'' in page.text
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    assert (
        f'hx-confirm="Delete {running.name}? Its root disk is deleted; secondary disks are kept." '
        """hx-vals='{"confirm": "1"}'"""
    ) in client_for("owner").get(page.request["PATH_INFO"]).text


def test_a_stale_page_without_the_answer_gets_the_question_in_place_of_the_page(
    client_for, running, project
):
    url = reverse("instance-power", args=[project.slug, running.pk, "force_stop"])
    asked = client_for("operator").post(url, HTTP_HX_REQUEST="true")
    assert FORCE_STOP in asked.text
    assert (asked["HX-Retarget"], asked["HX-Reswap"]) == ("body", "innerHTML")
    running.refresh_from_db()
    assert running.power_state == PowerState.RUNNING


def test_nobody_is_asked_about_what_they_may_not_do(client_for, running, project):
    url = reverse("instance-power", args=[project.slug, running.pk, "force_stop"])
    refused = client_for("viewer").post(url, follow=True).text
    assert 'name="confirm"' not in refused and "Needs the operator role." in refused
    delete = reverse("instance-delete", args=[project.slug, running.pk])
    refused = client_for("operator").post(delete, follow=True).text
    assert 'name="confirm"' not in refused and "Needs the admin role." in refused
    assert Instance.objects.filter(pk=running.pk).exists()


def test_deleting_an_instance_asks_first(client_for, running, project):
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    delete = reverse("instance-delete", args=[project.slug, running.pk])
    asked = client_for("owner").post(delete).text
    assert "Delete web-1? Its root disk is deleted; secondary disks are kept." in asked
    assert Instance.objects.filter(pk=running.pk).exists()
    gone = client_for("owner").post(delete, {"confirm": "1"}, follow=True).text
    assert "Instance web-1 deleted." in gone
    assert not Instance.objects.filter(pk=running.pk).exists()


def test_the_question_page_carries_the_form_escaped(client_for, running, project):
    link = reverse("instance-nic-action", args=[project.slug, running.pk, "link"])
    nic = running.nics.get(index=0)
    asked = client_for("operator").post(link, {"nic": nic.pk, "up": "0", "x": '"><b>'}).text
    assert 'name="x" value="&quot;&gt;&lt;b&gt;"' in asked and "<b>" not in asked


def test_every_question_takes_the_page_of_a_form_without_its_answer(client_for, running, project):
    Instance.objects.filter(pk=running.pk).update(power_state=PowerState.STOPPED)
    snapshot = DiskSnapshot.objects.create(
        disk=running.disks.get(), name="nightly", state=SnapshotState.READY
    )
    nic = running.nics.get(index=0)
    for action, form, asks in (
        ("instance-disk-action", ("revert", {"snapshot": snapshot.pk}), "Reverting web-1-root"),
        ("instance-disk-action", ("delete-snapshot", {"snapshot": snapshot.pk}), "Delete snap"),
        ("instance-nic-action", ("link", {"nic": nic.pk, "up": "0"}), "eth0 is the primary"),
    ):
        url = reverse(action, args=[project.slug, running.pk, form[0]])
        asked = client_for("operator").post(url, form[1], HTTP_HX_REQUEST="true")
        assert asks in asked.text and asked["HX-Retarget"] == "body", action
    assert DiskSnapshot.objects.get().state == SnapshotState.READY
    assert running.nics.get(index=0).link_desired == "up"


def test_a_refused_action_says_why_and_is_not_tried(client_for, running, project):
    snapshot = DiskSnapshot.objects.create(
        disk=running.disks.get(), name="nightly", state=SnapshotState.READY
    )
    revert = reverse("instance-disk-action", args=[project.slug, running.pk, "revert"])
    page = client_for("operator").post(revert, {"snapshot": snapshot.pk}, follow=True).text
    assert "Stop the instance before reverting a disk to a snapshot." in page
    assert 'name="confirm"' not in page
    delete = reverse("instance-disk-action", args=[project.slug, running.pk, "delete-snapshot"])
    page = client_for("viewer").post(delete, {"snapshot": snapshot.pk}, follow=True).text
    assert "Needs the operator role." in page
    assert DiskSnapshot.objects.get().state == SnapshotState.READY
