"""The data channel's agent message, checked against the layout written out by hand from the
public client's description (big-endian, a 116-byte header, the UUID's halves swapped)."""

import hashlib
import json
import struct
import uuid

import pytest

from provisioning.clouds.aws import ssm_messages as wire


def by_hand(message_type: str, sequence: int, payload_type: int, payload: bytes, message_id):
    raw = message_id.bytes
    return (
        struct.pack(">I", 116)
        + message_type.encode().ljust(32, b" ")
        + struct.pack(">I", 1)
        + struct.pack(">Q", 1_700_000_000_000)
        + struct.pack(">q", sequence)
        + struct.pack(">Q", 0)
        + raw[8:]
        + raw[:8]
        + hashlib.sha256(payload).digest()
        + struct.pack(">I", payload_type)
        + struct.pack(">I", len(payload))
        + payload
    )


def test_a_message_encodes_to_the_documented_layout_and_back():
    message_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    message = wire.AgentMessage(
        wire.INPUT, 7, wire.PayloadType.OUTPUT, b"ls\r", message_id=message_id,
        created_ms=1_700_000_000_000,
    )  # fmt: skip
    expected = by_hand("input_stream_data", 7, 1, b"ls\r", message_id)
    assert message.encode() == expected
    assert expected[4 + 32 + 4 + 8 + 8 + 8 :][:16] == bytes.fromhex(
        "8899aabbccddeeff0011223344556677"
    )
    assert wire.decode(expected) == message


@pytest.mark.parametrize(
    "broken, why",
    [
        (lambda frame: struct.pack(">I", 112) + frame[4:], "header length 112"),
        (lambda frame: frame[:-1] + b"X", "digest"),
        (lambda frame: frame[:-2], "runs past"),
        (lambda frame: frame[:50], "shorter"),
    ],
)
def test_a_malformed_frame_says_what_is_wrong(broken, why):
    frame = wire.AgentMessage(wire.OUTPUT, 0, 1, b"hello").encode()
    with pytest.raises(wire.Malformed, match=why):
        wire.decode(broken(frame))


def test_an_acknowledgement_names_the_message_it_acknowledges():
    message = wire.AgentMessage(wire.OUTPUT, 41, 1, b"x")
    ack = wire.decode(wire.acknowledgement(message).encode())
    assert ack.message_type == "acknowledge" and ack.flags == 3
    assert json.loads(ack.payload) == {
        "AcknowledgedMessageType": "output_stream_data",
        "AcknowledgedMessageId": str(message.message_id),
        "AcknowledgedMessageSequenceNumber": 41,
        "IsSequentialMessage": True,
    }
    assert wire.acknowledged_sequence(ack) == 41


def test_the_opening_frame_carries_the_token():
    opened = json.loads(wire.open_frame("the-token"))
    assert opened["MessageSchemaVersion"] == "1.0" and opened["TokenValue"] == "the-token"
    assert uuid.UUID(opened["RequestId"]) and uuid.UUID(opened["ClientId"])
