"""The console proxy itself: who gets in, what reaches the backend, fan-out and keyboard.

A real proxy server (in-process, on a free port) and real websockets; the backend is a fake
unix socket that records every byte it receives, so "nothing reached the backend" is checked
against what it actually got.
"""

import contextlib
import json
import time
from datetime import timedelta

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from instances.models import AuditEvent, ConsoleSession, ConsoleTicket
from tests.instances.consoles.conftest import issue_ticket, open_console, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def control(ws, kind: str, timeout: float = 5) -> dict:
    """The next control message of this type (binary output in between is skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, str) and json.loads(message)["type"] == kind:
            return json.loads(message)


def output_until(ws, expected: bytes, timeout: float = 5) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while expected not in seen:
        message = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, bytes):
            seen += message
    return seen


def next_output(ws, timeout: float = 5) -> bytes:
    while True:
        message = ws.recv(timeout=timeout)
        if isinstance(message, bytes):
            return message


def send_quietly(ws, data) -> None:
    """Send, even if the proxy has already closed the connection (refused tests)."""
    with contextlib.suppress(ConnectionClosed):
        ws.send(data)


def refused(ws) -> ConnectionClosed:
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=5)
    return closed.value


def assert_backend_untouched(fake_backend, kind: str = "serial") -> None:
    time.sleep(0.2)  # anything in flight would have arrived by now
    assert fake_backend.connections[kind] == 0
    assert fake_backend.received[kind] == b""


@contextlib.contextmanager
def booted_and_viewed(console_proxy, fake_backend, instance, user):
    """A first viewer's console on an instance whose serial log holds its boot line."""
    fake_backend.serial_log.write_bytes(b"boot\r\n")
    with open_console(
        console_proxy, instance, ticket=issue_ticket(user, instance), cookie_user=user
    ) as first:
        control(first, "hello")
        yield first


def test_an_operator_types_into_the_serial_console_and_sees_the_echo(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=operator) as ws:
        assert ws.subprotocol == "zopday.console"  # the ticket subprotocol is never echoed
        hello = control(ws, "hello")
        assert hello["mine"] and not hello["read_only"]
        ws.send(b"echo hi\r")
        assert b"echo hi" in output_until(ws, b"echo hi\r")
    wait_until(lambda: bytes(fake_backend.received["serial"]) == b"echo hi\r", "the keystrokes")
    session = wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).first(), "the session end"
    )
    assert (session.username, session.kind, session.read_only) == ("operator", "serial", False)
    assert session.bytes_to_guest == 8 and session.bytes_from_guest == 8
    assert AuditEvent.objects.filter(action="console.serial", actor=operator).exists()


@pytest.mark.parametrize("kind", ["serial", "vnc", "exec"])
def test_an_expired_ticket_is_refused_before_the_backend_is_reached(
    console_proxy, fake_backend, running_instance, operator, kind
):
    ticket = issue_ticket(operator, running_instance, kind)
    ConsoleTicket.objects.update(expires_at=ConsoleTicket.objects.get().created_at - timedelta(1))
    with open_console(
        console_proxy, running_instance, kind, ticket=ticket, cookie_user=operator
    ) as ws:
        send_quietly(ws, b"RFB 003.008\n" if kind == "vnc" else b"reboot\r")
        assert refused(ws).rcvd.code == 4403
    assert_backend_untouched(fake_backend, kind)


def test_a_ticket_works_once(console_proxy, fake_backend, running_instance, operator):
    ticket = issue_ticket(operator, running_instance)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=operator) as ws:
        control(ws, "hello")
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=operator) as ws:
        send_quietly(ws, b"reboot\r")
        assert refused(ws).rcvd.code == 4403
    time.sleep(0.2)
    assert fake_backend.received["serial"] == b""


def test_a_forged_ticket_is_refused(console_proxy, fake_backend, running_instance, operator):
    issue_ticket(operator, running_instance)
    forged = "A" * 43
    with open_console(console_proxy, running_instance, ticket=forged, cookie_user=operator) as ws:
        send_quietly(ws, b"reboot\r")
        closed = refused(ws)
    assert closed.rcvd.code == 4403 and "not valid" in closed.rcvd.reason
    assert_backend_untouched(fake_backend)


def test_another_users_ticket_is_refused_and_stays_unused(
    console_proxy, fake_backend, running_instance, operator, owner
):
    ticket = issue_ticket(operator, running_instance)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=owner) as ws:
        send_quietly(ws, b"reboot\r")
        assert refused(ws).rcvd.code == 4403
    assert_backend_untouched(fake_backend)
    assert ConsoleTicket.objects.get().claimed_at is None


def test_a_ticket_without_a_logged_in_browser_is_refused(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=None) as ws:
        assert "not logged in" in refused(ws).rcvd.reason
    assert_backend_untouched(fake_backend)


def test_a_ticket_for_another_instance_is_refused(
    console_proxy, fake_backend, running_instance, operator, project, owner, subnet
):
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    other = instance_create(
        project=project, actor=owner, request=instance_request(subnet, name="other")
    )
    other.power_state = "running"
    other.save()
    ticket = issue_ticket(operator, other)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=operator) as ws:
        send_quietly(ws, b"reboot\r")
        assert refused(ws).rcvd.code == 4403
    assert_backend_untouched(fake_backend)


def test_a_ticket_for_another_console_kind_is_refused(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance, "serial")
    with open_console(
        console_proxy, running_instance, "exec", ticket=ticket, cookie_user=operator
    ) as ws:
        send_quietly(ws, b"reboot\n")
        assert refused(ws).rcvd.code == 4403
    assert_backend_untouched(fake_backend, "exec")
    assert_backend_untouched(fake_backend, "serial")


def test_a_page_from_another_origin_cannot_open_a_console(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance)
    with pytest.raises(InvalidStatus) as error:
        open_console(
            console_proxy,
            running_instance,
            ticket=ticket,
            cookie_user=operator,
            origin="http://evil.example",
        )
    assert error.value.response.status_code == 403
    assert_backend_untouched(fake_backend)
    assert ConsoleTicket.objects.get().claimed_at is None


def test_the_ticket_may_come_as_the_first_message_instead(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance)
    with open_console(
        console_proxy, running_instance, ticket=None, cookie_user=operator, subprotocols=[]
    ) as ws:
        assert ws.subprotocol is None
        ws.send(ticket)
        assert control(ws, "hello")["mine"]


def test_a_viewers_keystrokes_go_nowhere(
    console_proxy, fake_backend, running_instance, viewer, operator
):
    with open_console(
        console_proxy,
        running_instance,
        ticket=issue_ticket(viewer, running_instance),
        cookie_user=viewer,
    ) as ws:
        hello = control(ws, "hello")
        assert hello["read_only"] and not hello["mine"]
        ws.send(b"reboot\r")
        ws.send(json.dumps({"type": "take"}))
        assert "read-only" in control(ws, "error")["message"]
        ws.send(b"poweroff -f\r")
        time.sleep(0.3)
    assert fake_backend.connections["serial"] == 1  # it watched the console...
    assert fake_backend.received["serial"] == b""  # ...and nothing it typed got through
    session = wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).first(), "end"
    )
    assert session.read_only and session.bytes_to_guest == 0


def test_viewers_share_one_backend_connection_and_take_the_keyboard_explicitly(
    console_proxy, fake_backend, running_instance, operator, owner
):
    instance = running_instance
    with open_console(
        console_proxy, instance, ticket=issue_ticket(operator, instance), cookie_user=operator
    ) as first:
        assert control(first, "hello")["mine"]
        with open_console(
            console_proxy, instance, ticket=issue_ticket(owner, instance), cookie_user=owner
        ) as second:
            hello = control(second, "hello")
            assert not hello["mine"] and hello["holder"] == "operator" and hello["viewers"] == 2

            first.send(b"date\r")
            output_until(first, b"date\r")
            output_until(second, b"date\r")  # the second viewer sees the same output
            second.send(b"reboot\r")  # ...but cannot type yet
            time.sleep(0.2)
            assert bytes(fake_backend.received["serial"]) == b"date\r"

            second.send(json.dumps({"type": "take"}))
            assert control(second, "keyboard")["mine"]
            assert control(first, "keyboard") == {
                "type": "keyboard",
                "mine": False,
                "holder": "owner",
            }
            second.send(b"uptime\r")
            output_until(first, b"uptime\r")
            first.send(b"ignored\r")
            time.sleep(0.2)
            assert bytes(fake_backend.received["serial"]) == b"date\ruptime\r"
            assert fake_backend.connections["serial"] == 1


def test_a_late_viewer_first_gets_recent_serial_output_then_live_bytes(
    console_proxy, fake_backend, running_instance, operator, owner
):
    instance = running_instance
    fake_backend.serial_log.write_bytes(b"x" * 10_000 + b"boot messages\r\n")
    with open_console(
        console_proxy, instance, ticket=issue_ticket(operator, instance), cookie_user=operator
    ) as first:
        hello = control(first, "hello")
        assert hello["position"] == 10_015 and hello["history"] == 4096  # the tail, capped
        assert next_output(first).endswith(b"boot messages\r\n")

        # once lined up, the hub counts what the socket brings: the same bytes as the log
        with fake_backend.serial_log.open("ab") as log:
            log.write(b"$ late\r\n")
        fake_backend.emit("serial", b"$ late\r\n")
        assert next_output(first) == b"$ late\r\n"
        with open_console(
            console_proxy, instance, ticket=issue_ticket(owner, instance), cookie_user=owner
        ) as second:
            hello = control(second, "hello")
            assert hello["position"] == 10_023 and hello["epoch"]
            history = next_output(second)
            assert history.endswith(b"boot messages\r\n$ late\r\n") and len(history) == 4096
            fake_backend.emit("serial", b"live\r\n")
            assert next_output(second) == b"live\r\n"  # no gap, no repeat
            assert next_output(first) == b"live\r\n"


@pytest.mark.parametrize("socket_first", [False, True], ids=["logged-first", "sent-first"])
def test_output_logged_before_the_proxy_was_connected_is_filled_in_from_the_log(
    console_proxy, fake_backend, running_instance, operator, owner, socket_first
):
    """QEMU logs even while it has no client; and it writes the log just after the socket, so
    bytes the socket brings first are looked up again rather than counting the gap as unseen."""
    instance = running_instance
    fake_backend.serial_log.write_bytes(b"old\r\n")
    with open_console(
        console_proxy, instance, ticket=issue_ticket(operator, instance), cookie_user=operator
    ) as first:
        assert control(first, "hello")["position"] == 5
        with fake_backend.serial_log.open("ab") as log:  # printed while QEMU had no client
            log.write(b"raced\r\n")
        if socket_first:
            fake_backend.emit("serial", b"$ prompt")
            time.sleep(0.2)  # longer than ALIGN_SECONDS: the first look misses it
        with fake_backend.serial_log.open("ab") as log:
            log.write(b"$ prompt")
        if not socket_first:
            fake_backend.emit("serial", b"$ prompt")
        assert next_output(first) == b"old\r\n"
        assert next_output(first) == b"raced\r\n$ prompt"  # the gap is filled from the log
        with open_console(
            console_proxy, instance, ticket=issue_ticket(owner, instance), cookie_user=owner
        ) as second:
            hello = control(second, "hello")
            assert hello["position"] == len(b"old\r\nraced\r\n$ prompt")
            assert next_output(second) == b"old\r\nraced\r\n$ prompt"


def test_a_viewer_joining_before_qemu_logged_the_latest_output_gets_it_all_the_same(
    console_proxy, fake_backend, running_instance, operator, owner
):
    """QEMU writes its log just after the socket: what the socket brought last may not be in
    the log yet. The history still ends at the position the greeting names, or a reconnecting
    page would show the wrong bytes where it resumes."""
    instance = running_instance
    with booted_and_viewed(console_proxy, fake_backend, instance, operator) as first:
        with fake_backend.serial_log.open("ab") as log:
            log.write(b"$ ls\r\n")
        fake_backend.emit("serial", b"$ ls\r\n")
        assert next_output(first) == b"boot\r\n"
        assert next_output(first) == b"$ ls\r\n"
        fake_backend.emit("serial", b"$ ")  # in the socket, not yet in the log
        assert next_output(first) == b"$ "
        with open_console(
            console_proxy, instance, ticket=issue_ticket(owner, instance), cookie_user=owner
        ) as second:
            hello = control(second, "hello")
            assert (hello["position"], hello["history"]) == (len(b"boot\r\n$ ls\r\n$ "),) * 2
            assert next_output(second) == b"boot\r\n$ ls\r\n$ "


@pytest.mark.parametrize("more_than_the_history", [False, True], ids=["short", "long"])
def test_a_late_viewer_gets_what_the_others_were_sent_even_where_qemu_logged_it_otherwise(
    console_proxy, fake_backend, running_instance, operator, owner, more_than_the_history
):
    """QEMU's log is not a copy of the socket's stream: when the socket is full, QEMU logs a
    byte as it fails to send it (EAGAIN) and again when the serial port sends it again, and it
    logs bytes it gives up sending. Once the hub runs, the history is what it delivered, so it
    ends exactly where the others' screens do (seen in CI: the log had bytes twice from the
    boot, and a late viewer's history ended at "zop-4")."""
    instance = running_instance
    with booted_and_viewed(console_proxy, fake_backend, instance, operator) as first:
        assert next_output(first) == b"boot\r\n"
        flood = b"[    1.178505] pci_bus 0000:00: root bus resource\r\n" * 100
        if more_than_the_history:  # the history no longer reaches back to the log
            with fake_backend.serial_log.open("ab") as log:
                log.write(flood[:1000] + flood[1000:].replace(b"pci_bus", b"pci__bus", 1))
            fake_backend.emit("serial", flood)
            output_until(first, flood)
        sent = b"# echo zop-$((6*7))\r\nzop-42\r\n# \x1b[6n"
        with fake_backend.serial_log.open("ab") as log:
            log.write(b"# ecchoo zop-$((6*7))\r\nzop-42\r\n# \x1b[6n")
        fake_backend.emit("serial", sent)
        seen = output_until(first, sent)
        assert seen.endswith(sent)
        with open_console(
            console_proxy, instance, ticket=issue_ticket(owner, instance), cookie_user=owner
        ) as second:
            hello = control(second, "hello")
            history = next_output(second)
            assert history.endswith(b"\r\nzop-42\r\n# \x1b[6n")
            assert len(history) == hello["history"] == min(4096, hello["position"])
            everything = b"boot\r\n" + (flood if more_than_the_history else b"") + sent
            assert history == everything[-4096:]
            assert hello["position"] == len(everything)
            fake_backend.emit("serial", b"live")
            assert next_output(second) == b"live"  # no gap, no repeat
            assert next_output(first) == b"live"


def test_terminal_sessions_are_recorded_as_asciicast_v2(
    console_proxy, fake_backend, running_instance, operator, settings
):
    ticket = issue_ticket(operator, running_instance, "exec")
    with open_console(
        console_proxy, running_instance, "exec", ticket=ticket, cookie_user=operator
    ) as ws:
        control(ws, "hello")
        ws.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
        ws.send("héllo\n".encode())
        output_until(ws, "héllo\n".encode())
        ws.send(json.dumps({"type": "ping"}))
        control(ws, "pong")
    session = wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).first(), "the session end"
    )
    path = settings.RUN_DIR / session.recording
    lines = wait_until(lambda: path.exists() and path.read_text().splitlines(), "the recording")
    header = json.loads(lines[0])
    assert header["version"] == 2 and header["width"] == 80
    events = [json.loads(line) for line in lines[1:]]
    assert [event[1:] for event in events] == [["r", "120x40"], ["o", "héllo\n"]]
    assert events[0][0] <= events[1][0]


def test_a_console_of_a_machine_that_is_not_running_closes_with_a_reason(
    console_proxy, fake_backend, running_instance, operator
):
    fake_backend.stop()
    for kind in ("serial", "exec", "vnc"):
        fake_backend.socket_path(kind).unlink()
    ticket = issue_ticket(operator, running_instance)
    with open_console(console_proxy, running_instance, ticket=ticket, cookie_user=operator) as ws:
        said = json.loads(ws.recv(timeout=5))  # the whole reason, then the close frame's
        closed = refused(ws)
    assert said["type"] == "error" and "not available" in said["message"]
    assert closed.rcvd.code == 4410 and "not available" in closed.rcvd.reason
    session = wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).first(), "end"
    )
    assert "not available" in session.close_reason


def test_health_check_and_unknown_paths(console_proxy):
    import urllib.request

    http_url = console_proxy.url.replace("ws://", "http://")
    assert urllib.request.urlopen(f"{http_url}/healthz").read() == b"ok\n"
    with pytest.raises(Exception, match="404"):
        urllib.request.urlopen(f"{http_url}/consoles/1/telnet")
