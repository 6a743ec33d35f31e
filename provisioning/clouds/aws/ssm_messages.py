"""Session Manager's data-channel messages: the binary "agent message" both ends exchange, and
the JSON payloads of the handshake and acknowledgements (the layout the public session-manager
plugin speaks; see the project's notes on the protocol)."""

import hashlib
import json
import struct
import time
import uuid
from dataclasses import dataclass, field
from enum import IntEnum

# message types, ASCII right-padded with spaces to 32 bytes
INPUT = "input_stream_data"
OUTPUT = "output_stream_data"
ACKNOWLEDGE = "acknowledge"
CHANNEL_CLOSED = "channel_closed"
START_PUBLICATION = "start_publication"
PAUSE_PUBLICATION = "pause_publication"
STREAM_TYPES = frozenset({INPUT, OUTPUT})

HEADER_LENGTH = 116  # where PayloadLength starts: HeaderLength itself up to PayloadType
SCHEMA_VERSION = 1
ACK_FLAGS = 3  # SYN and FIN, as the plugin sets them on acknowledgements
_HEADER = struct.Struct(">I32sIQqQ16s32sI")  # HeaderLength ... PayloadType
_LENGTH = struct.Struct(">I")
FIXED_BYTES = _HEADER.size + _LENGTH.size  # 120: everything before the payload


class PayloadType(IntEnum):
    OUTPUT = 1
    ERROR = 2
    SIZE = 3
    PARAMETER = 4
    HANDSHAKE_REQUEST = 5
    HANDSHAKE_RESPONSE = 6
    HANDSHAKE_COMPLETE = 7
    ENC_CHALLENGE_REQUEST = 8
    ENC_CHALLENGE_RESPONSE = 9
    FLAG = 10
    STDERR = 11
    EXIT_CODE = 12


class ActionStatus(IntEnum):
    SUCCESS = 1
    FAILED = 2
    UNSUPPORTED = 3


TERMINATE_FLAG = 2  # a Flag payload asking the agent to end the session


class Malformed(ValueError):
    """A frame that is no agent message: a wrong header length, digest or payload length."""


@dataclass(frozen=True)
class AgentMessage:
    message_type: str
    sequence_number: int = 0
    payload_type: int = 0
    payload: bytes = b""
    flags: int = 0
    message_id: uuid.UUID = field(default_factory=uuid.uuid4)
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def encode(self) -> bytes:
        name = self.message_type.encode("ascii").ljust(32, b" ")
        raw_id = self.message_id.bytes
        return (
            _HEADER.pack(
                HEADER_LENGTH,
                name,
                SCHEMA_VERSION,
                self.created_ms,
                self.sequence_number,
                self.flags,
                raw_id[8:] + raw_id[:8],
                hashlib.sha256(self.payload).digest(),
                self.payload_type,
            )
            + _LENGTH.pack(len(self.payload))
            + self.payload
        )

    def json(self) -> dict:
        """The payload's JSON object ({} when it is not one)."""
        try:
            value = json.loads(self.payload)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def decode(frame: bytes) -> AgentMessage:
    """The message a binary frame holds; Malformed says what is wrong with it."""
    if len(frame) < FIXED_BYTES:
        raise Malformed(f"a frame of {len(frame)} bytes is shorter than a message's header")
    header_length, name, _, created, sequence, flags, raw_id, digest, payload_type = (
        _HEADER.unpack_from(frame)
    )
    if header_length != HEADER_LENGTH:
        raise Malformed(f"header length {header_length}, not {HEADER_LENGTH}")
    (length,) = _LENGTH.unpack_from(frame, _HEADER.size)
    payload = frame[FIXED_BYTES : FIXED_BYTES + length]
    if len(payload) != length:
        raise Malformed(f"a payload of {length} bytes runs past the frame's end")
    if hashlib.sha256(payload).digest() != digest:
        raise Malformed("the payload's digest does not match")
    return AgentMessage(
        message_type=name.decode("ascii", errors="replace").strip(" \x00"),
        sequence_number=sequence,
        payload_type=payload_type,
        payload=payload,
        flags=flags,
        message_id=uuid.UUID(bytes=raw_id[8:] + raw_id[:8]),
        created_ms=created,
    )


def stream(message_type: str, sequence: int, payload_type: int, payload: bytes) -> AgentMessage:
    return AgentMessage(message_type, sequence, int(payload_type), payload)


def json_payload(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def acknowledgement(of: AgentMessage) -> AgentMessage:
    """The acknowledge message for a stream message."""
    return AgentMessage(
        ACKNOWLEDGE,
        0,
        0,
        json_payload(
            {
                "AcknowledgedMessageType": of.message_type,
                "AcknowledgedMessageId": str(of.message_id),
                "AcknowledgedMessageSequenceNumber": of.sequence_number,
                "IsSequentialMessage": True,
            }
        ),
        flags=ACK_FLAGS,
    )


def acknowledged_sequence(ack: AgentMessage) -> int | None:
    """The sequence number an acknowledge message acknowledges (None if it names none)."""
    number = ack.json().get("AcknowledgedMessageSequenceNumber")
    return number if isinstance(number, int) else None


def open_frame(token: str, request_id: str = "", client_id: str = "") -> str:
    """The text frame that opens the channel: the session's token."""
    return json.dumps(
        {
            "MessageSchemaVersion": "1.0",
            "RequestId": request_id or str(uuid.uuid4()),
            "TokenValue": token,
            "ClientId": client_id or str(uuid.uuid4()),
        }
    )
