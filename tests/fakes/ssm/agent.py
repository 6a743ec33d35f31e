"""The agent's side of Session Manager's data channel: the token, the handshake, numbered output
resent until acknowledged, input acknowledged and delivered in order to a real shell; with the
faults a test asks for (reordered, duplicated or dropped output, withheld acknowledgements)."""

import asyncio
import contextlib
import json
import secrets
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from provisioning.clouds.aws import ssm_messages as wire
from provisioning.clouds.aws.ssm_messages import AgentMessage, PayloadType

from .shell import Shell

RESEND_SECONDS = 0.2
LATE_SECONDS = 1.0  # a lost or swapped message with nothing after it goes at last
KMS_MESSAGE = "KMS encryption is required by this account's Session Manager preferences."


@dataclass
class Faults:
    reorder: bool = False  # each pair of outgoing stream messages goes in swapped order
    duplicate: bool = False  # each goes twice
    drop_every: int = 0  # the first send of every Nth is lost: only its resend arrives
    withhold_acks: int = 0  # the first N incoming stream messages are ignored, unacknowledged


@dataclass
class AgentSession:
    """One session: what the client sent and how the channel went, for the tests to read."""

    session_id: str
    target: str
    token: str
    folder: Path
    faults: Faults
    input: bytearray = field(default_factory=bytearray)  # what reached the shell, in order
    sizes: list[tuple[int, int]] = field(default_factory=list)
    acks_received: int = 0
    duplicates_dropped: int = 0
    malformed: int = 0
    connections: int = 0
    ended: bool = False
    ws: ServerConnection | None = None
    shell: Shell | None = None
    require_kms: bool = False
    _next_out: int = 0
    _next_in: int = 0
    _early: dict[int, AgentMessage] = field(default_factory=dict)
    _unacked: dict[int, list] = field(default_factory=dict)  # seq -> [frame, last sent]
    _late: list[list] = field(default_factory=list)  # lost or swapped: sent after the next
    _sent: int = 0

    def new_token(self) -> str:
        self.token = secrets.token_urlsafe(24)
        return self.token

    # ---- the channel -------------------------------------------------------------------

    async def serve(self, ws: ServerConnection) -> None:
        """One websocket of the session (the first, or one that resumes it)."""
        self.ws, self.connections = ws, self.connections + 1
        if self.connections == 1:
            actions = [{"ActionType": "SessionType", "ActionParameters": {
                "SessionType": "Standard_Stream", "Properties": {}}}]  # fmt: skip
            if self.require_kms:
                actions.append({"ActionType": "KMSEncryption", "ActionParameters": {
                    "KMSKeyId": "arn:aws:kms:us-east-1:123456789012:key/zopday"}})  # fmt: skip
            request = {"AgentVersion": "3.3.0.0", "RequestedClientActions": actions}
            await self.send_stream(PayloadType.HANDSHAKE_REQUEST, wire.json_payload(request))
        else:
            for entry in self._unacked.values():
                entry[1] = 0.0
            await self.resend_due()
        resender = asyncio.get_running_loop().create_task(self._resend_forever())
        try:
            async for frame in ws:
                if isinstance(frame, bytes):
                    await self._receive(frame)
        except ConnectionClosed:
            pass
        finally:
            resender.cancel()
            if self.ws is ws:
                self.ws = None

    async def _receive(self, frame: bytes) -> None:
        try:
            message = wire.decode(frame)
        except wire.Malformed:
            self.malformed += 1
            return
        if message.message_type == wire.ACKNOWLEDGE:
            self.acks_received += 1
            self._unacked.pop(wire.acknowledged_sequence(message), None)
            return
        if message.message_type != wire.INPUT:
            return
        if self.faults.withhold_acks > 0:
            self.faults.withhold_acks -= 1
            return
        await self._send(wire.acknowledgement(message).encode())
        number = message.sequence_number
        if number < self._next_in or number in self._early:
            self.duplicates_dropped += 1
            return
        self._early[number] = message
        while self._next_in in self._early:
            self._next_in += 1
            await self._take(self._early.pop(self._next_in - 1))

    async def _take(self, message: AgentMessage) -> None:
        kind, payload = message.payload_type, message.payload
        if kind == PayloadType.HANDSHAKE_RESPONSE:
            await self._handshake_answered(message.json())
        elif kind == PayloadType.OUTPUT and self.shell is not None:
            self.input += payload
            self.shell.write(payload)
        elif kind == PayloadType.SIZE:
            size = message.json()
            self.sizes.append((int(size["cols"]), int(size["rows"])))
            if self.shell is not None:
                self.shell.resize(*self.sizes[-1])
        elif (
            kind == PayloadType.FLAG and struct.unpack(">I", payload[:4])[0] == wire.TERMINATE_FLAG
        ):
            await self.end(f"Exiting session with sessionId: {self.session_id}.")

    async def _handshake_answered(self, response: dict) -> None:
        statuses = {
            action.get("ActionType"): action.get("ActionStatus")
            for action in response.get("ProcessedClientActions", [])
        }
        if self.require_kms and statuses.get("KMSEncryption") != wire.ActionStatus.SUCCESS:
            await self.end(KMS_MESSAGE)
            return
        complete = {"HandshakeTimeToComplete": 1000000, "CustomerMessage": ""}
        await self.send_stream(PayloadType.HANDSHAKE_COMPLETE, wire.json_payload(complete))
        size = self.sizes[-1] if self.sizes else (80, 24)
        self.shell = Shell(self.folder, self._shell_output, self._shell_exited, size)

    def _shell_output(self, data: bytes) -> None:
        asyncio.get_running_loop().create_task(self.send_stream(PayloadType.OUTPUT, data))

    def _shell_exited(self) -> None:
        message = f"Exiting session with sessionId: {self.session_id}."
        asyncio.get_running_loop().create_task(self.end(message))

    # ---- sending -----------------------------------------------------------------------

    async def send_stream(self, payload_type: PayloadType, payload: bytes) -> None:
        """Number and send a message; a lost or swapped one goes out only after the next one
        (or after LATE_SECONDS if none follows), so the client surely sees it out of order."""
        message = wire.stream(wire.OUTPUT, self._next_out, payload_type, payload)
        self._next_out += 1
        entry = [message.encode(), time.monotonic()]
        self._unacked[message.sequence_number] = entry
        self._sent += 1
        faults = self.faults
        lost = faults.drop_every and self._sent % faults.drop_every == 0
        if lost or (faults.reorder and not self._late):
            self._late.append(entry)  # lost: its resend comes later; reordered: its turn does
            return
        await self._send(entry[0])
        if faults.duplicate:
            await self._send(entry[0])
        await self._send_late(force=True)

    async def _send_late(self, *, force: bool) -> None:
        now = time.monotonic()
        while self._late and (force or now - self._late[0][1] >= LATE_SECONDS):
            late = self._late.pop(0)
            late[1] = now
            await self._send(late[0])

    async def resend_due(self) -> None:
        await self._send_late(force=False)
        now = time.monotonic()
        for entry in list(self._unacked.values()):
            if now - entry[1] >= RESEND_SECONDS and not any(entry is late for late in self._late):
                entry[1] = now
                await self._send(entry[0])

    async def _resend_forever(self) -> None:
        while True:
            await asyncio.sleep(RESEND_SECONDS / 2)
            await self.resend_due()

    async def _send(self, frame: bytes) -> None:
        if self.ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(frame)

    # ---- the end -----------------------------------------------------------------------

    async def end(self, output: str) -> None:
        """End the session: the shell goes, the client is told why, the channel closes."""
        if self.ended:
            return
        self.ended = True
        if self.shell is not None:
            self.shell.kill()
        closed = {
            "MessageType": "channel_closed", "MessageId": secrets.token_hex(8),
            "CreatedDate": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "DestinationId": self.target, "SessionId": self.session_id, "SchemaVersion": 1,
            "Output": output,
        }  # fmt: skip
        message = AgentMessage(wire.CHANNEL_CLOSED, 0, 0, json.dumps(closed).encode())
        await self._send(message.encode())
        if self.ws is not None:
            await self.ws.close()

    def cut(self) -> None:
        """The network drops: the TCP connection goes without a close frame."""
        if self.ws is not None:
            self.ws.transport.abort()
