"""The console pages, their tickets, the serial log download and the recordings pages."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from instances.choices import PowerState
from instances.consoles.recording import Recorder, part_path
from instances.consoles.tickets import SUBPROTOCOL_PREFIX, ticket_hash
from instances.models import ConsoleSession, ConsoleTicket, Instance

pytestmark = pytest.mark.django_db


def ticket_url(instance: Instance, kind: str = "serial") -> str:
    return reverse("instance-console-ticket", args=[instance.project.slug, instance.pk, kind])


def test_an_operator_gets_an_interactive_single_use_ticket(client_for, running_instance):
    response = client_for("operator").post(ticket_url(running_instance))
    assert response.status_code == 200 and response["Cache-Control"].startswith("max-age=0")
    body = response.json()
    assert body["url"] == f"ws://testserver:8765/consoles/{running_instance.pk}/serial"
    assert body["read_only"] is False and body["expires_in"] <= 60
    plaintext = body["subprotocol"].removeprefix(SUBPROTOCOL_PREFIX)
    assert plaintext not in body["url"]
    ticket = ConsoleTicket.objects.get()
    assert ticket.token_hash == ticket_hash(plaintext) and plaintext not in ticket.token_hash
    assert (ticket.user.username, ticket.instance, ticket.kind) == (
        "operator",
        running_instance,
        "serial",
    )
    assert 0 < (ticket.expires_at - ticket.created_at).total_seconds() <= 60


def test_a_viewers_ticket_is_read_only(client_for, running_instance):
    body = client_for("viewer").post(ticket_url(running_instance, "vnc")).json()
    assert body["read_only"] is True and ConsoleTicket.objects.get().read_only


def test_outsiders_get_404_and_nothing_is_issued(client_for, running_instance):
    assert client_for("outsider").post(ticket_url(running_instance)).status_code == 404
    assert Client().post(ticket_url(running_instance)).status_code == 302  # to the login page
    assert not ConsoleTicket.objects.exists()


def test_tickets_need_a_post_with_the_csrf_token(operator, running_instance):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get(ticket_url(running_instance)).status_code == 405
    assert client.post(ticket_url(running_instance)).status_code == 403
    assert not ConsoleTicket.objects.exists()


def test_a_stopped_instance_has_no_console(client_for, running_instance):
    Instance.objects.filter(pk=running_instance.pk).update(power_state=PowerState.STOPPED)
    response = client_for("operator").post(ticket_url(running_instance))
    assert response.status_code == 409
    assert response.json() == {"detail": "The instance is stopped: start it first."}


def test_unknown_console_kinds_are_404(client_for, running_instance):
    assert client_for("operator").post(ticket_url(running_instance, "telnet")).status_code == 404


def test_the_proxy_url_can_be_configured(client_for, running_instance, settings):
    settings.CONSOLEPROXY_URL = "wss://consoles.example.com/"
    body = client_for("operator").post(ticket_url(running_instance, "exec")).json()
    assert body["url"] == f"wss://consoles.example.com/consoles/{running_instance.pk}/exec"


@pytest.mark.parametrize("kind", ["serial", "exec", "vnc"])
def test_the_console_pages_open_for_members(client_for, running_instance, kind):
    url = reverse("instance-console", args=["alpha", running_instance.pk, kind])
    operator_page = client_for("operator").get(url).text
    assert 'id="console"' in operator_page and 'data-can-open="true"' in operator_page
    assert client_for("outsider").get(url).status_code == 404
    viewer = client_for("viewer").get(url)
    assert viewer.status_code == 200
    viewer_page = viewer.text
    assert 'data-can-open="true"' in viewer_page  # to watch: the ticket makes it read-only
    client = "js/console_vnc.js" if kind == "vnc" else "vendor/xterm/xterm.js"
    assert client in operator_page and client in viewer_page
    if kind == "vnc":  # keys are sent only by those who may type
        assert "ctrl-alt-del" in operator_page and "ctrl-alt-del" not in viewer_page
        assert 'data-keys="XK_Control_L:ControlLeft XK_Alt_L:AltLeft XK_F2:F2"' in operator_page
        assert 'data-hold="XK_Control_L:ControlLeft"' in operator_page
        assert "virtual-keys" not in viewer_page


def test_the_details_page_offers_the_consoles_in_its_options_menu(client_for, running_instance):
    url = reverse("instance-detail", args=["alpha", running_instance.pk])
    text = client_for("operator").get(url).text
    assert "<summary>Options</summary>" in text
    for kind, label in (("serial", "Serial"), ("vnc", "VNC"), ("exec", "Exec")):
        assert f'data-console="{kind}">{label} console</a>' in text
    assert "Console recordings" not in text
    assert "Console recordings" in client_for("owner").get(url).text
    Instance.objects.filter(pk=running_instance.pk).update(power_state=PowerState.STOPPED)
    stopped = client_for("operator").get(url).text
    assert (
        'title="The instance is stopped: start it first." data-console="serial">Serial' in stopped
    )


def test_members_download_the_serial_log(client_for, running_instance, settings, tmp_path):
    from instances.backends import backend_named

    settings.ZOPDAY_MACHINES_DIR = tmp_path
    backend_named.cache_clear()
    try:
        url = reverse("instance-serial-log", args=["alpha", running_instance.pk])
        assert client_for("viewer").get(url).status_code == 404  # nothing printed yet
        log = backend_named("qemu").serial_log(running_instance.machine_id)
        log.parent.mkdir(parents=True)
        log.write_bytes(b"zopday-demo: ready\r\n")
        response = client_for("viewer").get(url)
        assert (
            response.status_code == 200 and b"".join(response.streaming_content) == log.read_bytes()
        )
        assert response["Content-Disposition"] == 'attachment; filename="web-1-serial.log"'
        assert client_for("outsider").get(url).status_code == 404
    finally:
        backend_named.cache_clear()


def make_recorded_session(instance, settings, tmp_path) -> ConsoleSession:
    settings.RUN_DIR = tmp_path
    session = ConsoleSession.objects.create(
        project=instance.project, instance=instance, instance_name=instance.name,
        username="operator", kind="serial", recording="recordings/2026-11/session-1.cast",
    )  # fmt: skip
    path = tmp_path / session.recording
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 2, "width": 80, "height": 24}) + '\n[0.5, "o", "hi"]\n')
    return session


def test_admins_replay_and_download_recordings(client_for, running_instance, settings, tmp_path):
    session = make_recorded_session(running_instance, settings, tmp_path)
    args = ["alpha", running_instance.pk]
    owner = client_for("owner")
    assert "Replay" not in owner.get(reverse("instance-console-sessions", args=args)).text  # open
    session.ended_at = session.started_at
    session.save()
    listing = owner.get(reverse("instance-console-sessions", args=args)).text
    assert "Replay" in listing and "operator" in listing
    replay = owner.get(reverse("instance-console-replay", args=[*args, session.pk])).text
    assert "console_replay.js" in replay
    download = owner.get(reverse("instance-console-recording", args=[*args, session.pk]))
    assert download["Content-Type"] == "application/x-asciicast"
    assert b'"o", "hi"' in b"".join(download.streaming_content)


def test_only_admins_see_recordings(client_for, running_instance, settings, tmp_path):
    session = make_recorded_session(running_instance, settings, tmp_path)
    args = ["alpha", running_instance.pk]
    for url in (
        reverse("instance-console-sessions", args=args),
        reverse("instance-console-replay", args=[*args, session.pk]),
        reverse("instance-console-recording", args=[*args, session.pk]),
    ):
        assert client_for("operator").get(url).status_code == 403
        assert client_for("outsider").get(url).status_code == 404


def test_a_recording_outside_the_recordings_folder_is_never_served(
    client_for, running_instance, settings, tmp_path
):
    session = make_recorded_session(running_instance, settings, tmp_path)
    session.recording = "../../etc/passwd"
    session.save()
    url = reverse("instance-console-recording", args=["alpha", running_instance.pk, session.pk])
    assert client_for("owner").get(url).status_code == 404


def test_the_recording_of_an_open_session_is_not_served_nor_touched(
    client_for, running_instance, settings, tmp_path
):
    session = make_recorded_session(running_instance, settings, tmp_path)
    cast = tmp_path / session.recording
    cast.unlink()
    part = part_path(cast)
    part.write_text("being written by the proxy")
    args = ["alpha", running_instance.pk, session.pk]
    for name in ("instance-console-replay", "instance-console-recording"):
        assert client_for("owner").get(reverse(name, args=args)).status_code == 404
    assert part.read_text() == "being written by the proxy" and not cast.exists()


def test_the_recording_an_ended_session_left_unfinished_is_finished_when_asked_for(
    client_for, running_instance, settings, tmp_path
):
    session = make_recorded_session(running_instance, settings, tmp_path)
    cast = tmp_path / session.recording
    cast.unlink()
    recorder = Recorder(cast, title="web-1 serial")
    recorder.output(b"login: ")
    recorder.flush()  # the proxy was killed there: its part file stays
    assert recorder.fd == -1  # an idle recording holds no file open
    ConsoleSession.objects.filter(pk=session.pk).update(ended_at=session.started_at)
    url = reverse("instance-console-recording", args=["alpha", running_instance.pk, session.pk])

    download = client_for("owner").get(url)

    assert b'"o", "login: "]' in b"".join(download.streaming_content)
    assert not part_path(cast).exists()


def test_a_part_file_cut_off_in_its_header_is_no_recording(
    client_for, running_instance, settings, tmp_path
):
    session = make_recorded_session(running_instance, settings, tmp_path)
    cast = tmp_path / session.recording
    cast.unlink()
    part_path(cast).write_bytes(b"\x10\x00")  # killed in the middle of the header
    ConsoleSession.objects.filter(pk=session.pk).update(ended_at=session.started_at)
    url = reverse("instance-console-recording", args=["alpha", running_instance.pk, session.pk])
    assert client_for("owner").get(url).status_code == 404
