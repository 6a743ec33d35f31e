"""What VNC clients may send: the RFB filter, alone and through the proxy."""

import struct
import time

import pytest

from instances.consoles.rfb import ClientFilter, RfbError
from tests.instances.consoles.conftest import issue_ticket, open_console, wait_until

HANDSHAKE = b"RFB 003.008\n" + b"\x01" + b"\x00"  # version, security None, ClientInit (exclusive)
SET_ENCODINGS = struct.pack(">BxHii", 2, 2, 0, -223)
UPDATE_REQUEST = struct.pack(">BBHHHH", 3, 1, 0, 0, 640, 480)
KEY_CTRL_ALT_DEL = b"".join(
    struct.pack(">BBxxI", 4, down, key)
    for down, key in ((1, 0xFFE3), (1, 0xFFE9), (1, 0xFFFF), (0, 0xFFFF), (0, 0xFFE9), (0, 0xFFE3))
)
POINTER = struct.pack(">BBHH", 5, 1, 10, 10)
CUT_TEXT = struct.pack(">BxxxI", 6, 5) + b"hello"
QEMU_KEY = struct.pack(">BBHII", 255, 0, 1, 0xFFFF, 0xD3)
XVP_REBOOT = struct.pack(">BxBB", 250, 1, 3)
EVERYTHING = SET_ENCODINGS + KEY_CTRL_ALT_DEL + UPDATE_REQUEST + POINTER + CUT_TEXT + QEMU_KEY
EVERYTHING += XVP_REBOOT + UPDATE_REQUEST


def feed_bytewise(rfb: ClientFilter, data: bytes) -> bytes:
    return b"".join(rfb.feed(data[i : i + 1]) for i in range(len(data)))


def test_a_read_only_client_sends_only_what_it_needs_to_see_the_screen():
    out = feed_bytewise(ClientFilter(read_only=True), HANDSHAKE + EVERYTHING)
    assert out == b"RFB 003.008\n\x01\x01" + SET_ENCODINGS + UPDATE_REQUEST + UPDATE_REQUEST


def test_an_interactive_client_passes_through_but_always_shares_the_screen():
    rfb = ClientFilter(read_only=False)
    assert rfb.feed(HANDSHAKE + EVERYTHING) == b"RFB 003.008\n\x01\x01" + EVERYTHING
    assert rfb.passing_through and rfb.feed(POINTER) == POINTER


def test_rfb_3_3_has_no_security_message_and_vnc_auth_is_passed_on():
    assert ClientFilter(read_only=True).feed(b"RFB 003.003\n\x00") == b"RFB 003.003\n\x01"
    response = bytes(range(16))
    out = ClientFilter(read_only=True).feed(b"RFB 003.008\n\x02" + response + b"\x00" + POINTER)
    assert out == b"RFB 003.008\n\x02" + response + b"\x01"


def test_an_unknown_message_ends_a_read_only_session():
    rfb = ClientFilter(read_only=True)
    rfb.feed(HANDSHAKE)
    with pytest.raises(RfbError):
        rfb.feed(b"\x07whatever")
    with pytest.raises(RfbError):
        ClientFilter(read_only=True).feed(b"GET / HTTP/1.1\r\n")


@pytest.mark.django_db(transaction=True)
def test_a_viewers_vnc_input_never_reaches_qemu(
    console_proxy, fake_backend, running_instance, viewer
):
    ticket = issue_ticket(viewer, running_instance, "vnc")
    with open_console(
        console_proxy, running_instance, "vnc", ticket=ticket, cookie_user=viewer
    ) as ws:
        assert ws.subprotocol == "binary"
        ws.send(HANDSHAKE)
        for message in (SET_ENCODINGS, KEY_CTRL_ALT_DEL, UPDATE_REQUEST, POINTER, XVP_REBOOT):
            ws.send(message)
        expected = b"RFB 003.008\n\x01\x01" + SET_ENCODINGS + UPDATE_REQUEST
        wait_until(lambda: bytes(fake_backend.received["vnc"]) == expected, "the viewing messages")
        fake_backend.emit("vnc", b"RFB 003.008\n")
        assert ws.recv(timeout=5) == b"RFB 003.008\n"  # the screen still comes through
        time.sleep(0.2)
    assert bytes(fake_backend.received["vnc"]) == expected


@pytest.mark.django_db(transaction=True)
def test_an_operators_vnc_input_reaches_qemu(
    console_proxy, fake_backend, running_instance, operator
):
    ticket = issue_ticket(operator, running_instance, "vnc")
    with open_console(
        console_proxy, running_instance, "vnc", ticket=ticket, cookie_user=operator, subprotocols=[]
    ) as ws:
        ws.send(ticket)  # a client that offers no subprotocol sends its ticket first
        ws.send(HANDSHAKE + KEY_CTRL_ALT_DEL)
        expected = b"RFB 003.008\n\x01\x01" + KEY_CTRL_ALT_DEL
        wait_until(lambda: bytes(fake_backend.received["vnc"]) == expected, "the key events")
