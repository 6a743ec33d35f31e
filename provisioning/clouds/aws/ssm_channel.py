"""The client end of a Session Manager data channel, as the console proxy's link to a shell.

It opens the stream with the session's token, answers the agent's handshake, numbers what it
sends and resends it until acknowledged, acknowledges what it gets and delivers it in order
(buffering early messages, dropping repeats), sends the terminal's size, and resumes the session
on a new websocket when the network drops. It is a `Link` of the proxy's terminal hub: the hub
fans its output out to viewers and records it.
"""

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from instances.consoles.bridges.links import BACKEND_WRITE_LIMIT
from instances.egress import EgressRefused
from instances.egress.websocket import pinned_websocket
from provisioning.clouds.aws import ssm_messages as wire
from provisioning.clouds.aws.ssm_messages import AgentMessage, PayloadType

log = logging.getLogger("zopday.consoleproxy.ssm")

CLIENT_VERSION = "1.2.0.0"
INPUT_CHUNK = 1024  # bytes of keystrokes per message, as the plugin sends them
RESEND_SECONDS = 0.2  # an unacknowledged message goes again after this long
RESEND_GIVE_UP_SECONDS = 300  # ... for up to five minutes, as the plugin does
OPEN_SECONDS = 10
RESUME_TRIES = 5  # new websockets tried after a drop before the session is given up
MAX_BUFFERED = 4096  # out-of-order messages held before the channel is thought broken

KMS_REQUIRED = (
    "This account's Session Manager preferences require KMS encryption of sessions, which the "
    "console does not do yet: turn it off in Session Manager's preferences, or use the "
    "`aws ssm start-session` command shown on the instance's page."
)


@dataclass(frozen=True)
class Stream:
    """Where to open the channel and the token it takes (never in a log line)."""

    url: str
    token: str = field(repr=False)


@dataclass
class _Outgoing:
    message: AgentMessage
    frame: bytes
    first_sent: float
    last_sent: float = 0.0


class SsmChannel:
    """One session's data channel. `resume` asks Session Manager for a new token after a drop;
    `terminate` ends the session there when the console closes it. The stream URL is the
    endpoint's word: checked by the egress policy unless `checked` is off (a sandbox account)."""

    def __init__(
        self,
        stream: Stream,
        *,
        on_data: Callable[[bytes], None],
        on_closed: Callable[[], None],
        resume: Callable[[], Awaitable[Stream]],
        terminate: Callable[[], Awaitable[None]],
        ca_file: str = "",
        checked: bool = True,
    ) -> None:
        self.stream = stream
        self.checked = checked
        self.closed = False
        self.reason = ""  # why the channel ended, said to the viewers
        self.handshaken = asyncio.Event()
        self.ended = asyncio.Event()
        self._on_data, self._on_closed = on_data, on_closed
        self._resume, self._terminate = resume, terminate
        self._ws: ClientConnection | None = None
        self._next_out = 0  # sequence number of the next stream message sent
        self._next_in = 0  # ... of the next one to deliver
        self._early: dict[int, AgentMessage] = {}
        self._unacked: dict[int, _Outgoing] = {}
        self._held: list[tuple[PayloadType, bytes]] = []  # sent once the handshake completes
        self._size: tuple[int, int] | None = None
        self._paused_senders: list[ServerConnection] = []
        self._published = asyncio.Event()
        self._published.set()
        self._reading_paused = False
        self._wake = asyncio.Event()  # something new to send
        self.stats = {"duplicates": 0, "early": 0, "resent": 0, "malformed": 0, "resumed": 0}
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    # ---- opening -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and say the token; the handshake then runs in the channel's task."""
        self._ws = await self._connect(self.stream)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _connect(self, stream: Stream) -> ClientConnection:
        ws = await pinned_websocket(
            stream.url,
            checked=self.checked,
            compression=None,
            open_timeout=OPEN_SECONDS,
            max_size=None,
            ping_interval=20,
            user_agent_header="zopday-console",
        )
        await ws.send(wire.open_frame(stream.token))
        return ws

    async def _run(self) -> None:
        resender = asyncio.get_running_loop().create_task(self._resend_forever())
        try:
            while not self.closed:
                assert self._ws is not None
                try:
                    async for frame in self._ws:
                        if isinstance(frame, bytes):
                            await self._receive(frame)
                        if self.closed:
                            break
                except ConnectionClosed:
                    pass
                if self.closed:
                    break
                if not await self._reconnect():
                    break
        except Exception as error:  # the channel ends; the proxy goes on
            log.exception("SSM data channel failed")
            self.reason = self.reason or f"The session's data channel failed ({error})."
        finally:
            resender.cancel()
            self._finish()

    async def _reconnect(self) -> bool:
        """The websocket dropped without channel_closed: resume the session on a new one."""
        for attempt in range(RESUME_TRIES):
            await asyncio.sleep(min(0.2 * 2**attempt, 3))
            if self.closed:
                return False
            try:
                self.stream = await self._resume()
                self._ws = await self._connect(self.stream)
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as error:
                log.info("resuming the SSM session failed (try %d): %s", attempt + 1, error)
                continue
            except ResumeRefused as refused:
                self.reason = str(refused)
                return False
            except EgressRefused as refused:
                self.reason = refused.message
                return False
            except InvalidURI as error:
                self.reason = f"Session Manager gave a stream URL that is not one ({error})."
                return False
            self.stats["resumed"] += 1
            for outgoing in self._unacked.values():
                outgoing.last_sent = 0.0  # all of it again, on the new socket
            self._wake.set()
            return True
        self.reason = "The network to Session Manager dropped and the session could not resume."
        return False

    # ---- incoming ------------------------------------------------------------------------

    async def _receive(self, frame: bytes) -> None:
        try:
            message = wire.decode(frame)
        except wire.Malformed as malformed:
            self.stats["malformed"] += 1
            log.warning("dropped a malformed SSM message: %s", malformed)
            return
        kind = message.message_type
        if kind == wire.ACKNOWLEDGE:
            number = wire.acknowledged_sequence(message)
            outgoing = self._unacked.pop(number, None) if number is not None else None
            if outgoing is not None:
                self._resume_senders_if_drained()
        elif kind == wire.OUTPUT:
            await self._send_frame(wire.acknowledgement(message).encode())
            self._take_in_order(message)
        elif kind == wire.CHANNEL_CLOSED:
            self.reason = self.reason or _closed_reason(message)
            self.closed = True
        elif kind == wire.PAUSE_PUBLICATION:
            self._published.clear()
        elif kind == wire.START_PUBLICATION:
            self._published.set()

    def _take_in_order(self, message: AgentMessage) -> None:
        number = message.sequence_number
        if number < self._next_in or number in self._early:
            self.stats["duplicates"] += 1
            return
        if number > self._next_in:
            self.stats["early"] += 1
            if len(self._early) >= MAX_BUFFERED:
                raise RuntimeError("the agent skipped a message it never resent")
            self._early[number] = message
            return
        self._deliver(message)
        while self._next_in in self._early:
            self._deliver(self._early.pop(self._next_in))

    def _deliver(self, message: AgentMessage) -> None:
        self._next_in += 1
        kind = message.payload_type
        if kind in (PayloadType.OUTPUT, PayloadType.STDERR):
            if message.payload:
                self._on_data(message.payload)
        elif kind == PayloadType.HANDSHAKE_REQUEST:
            self._answer_handshake(message)
        elif kind == PayloadType.HANDSHAKE_COMPLETE:
            self.handshaken.set()
            if self._size is not None:
                self._queue(PayloadType.SIZE, _size_payload(*self._size))
            for payload_type, payload in self._held:
                self._queue(payload_type, payload)
            self._held.clear()

    def _answer_handshake(self, request: AgentMessage) -> None:
        """Take the session type; refuse KMS encryption, which this client does not do."""
        actions = request.json().get("RequestedClientActions") or []
        processed, errors = [], []
        for action in actions if isinstance(actions, list) else []:
            kind = str(action.get("ActionType", "")) if isinstance(action, dict) else ""
            status = wire.ActionStatus.SUCCESS if kind == "SessionType" else None
            if status is None:
                status = wire.ActionStatus.UNSUPPORTED
                errors.append(f"{kind} is not supported by this client")
                if kind == "KMSEncryption":
                    self.reason = KMS_REQUIRED
            processed.append({"ActionType": kind, "ActionStatus": int(status)})
        response = {
            "ClientVersion": CLIENT_VERSION,
            "ProcessedClientActions": processed,
            "Errors": errors,
        }
        self._queue(PayloadType.HANDSHAKE_RESPONSE, wire.json_payload(response), now=True)

    # ---- outgoing ------------------------------------------------------------------------

    def write(self, data: bytes, sender: ServerConnection) -> None:
        """Keystrokes from the hub's keyboard holder."""
        if self.closed:
            return
        for start in range(0, len(data), INPUT_CHUNK):
            self._queue(PayloadType.OUTPUT, data[start : start + INPUT_CHUNK])
        if self._unacked_bytes() > BACKEND_WRITE_LIMIT and sender not in self._paused_senders:
            sender.transport.pause_reading()
            self._paused_senders.append(sender)

    def resize(self, cols: int, rows: int) -> None:
        if self.closed or self._size == (cols, rows):
            return
        self._size = (cols, rows)
        if self.handshaken.is_set():
            self._queue(PayloadType.SIZE, _size_payload(cols, rows))

    def _queue(self, payload_type: PayloadType, payload: bytes, *, now: bool = False) -> None:
        """Number and send a stream message (held until the handshake unless `now`)."""
        if not now and not self.handshaken.is_set():
            self._held.append((payload_type, payload))
            return
        message = wire.stream(wire.INPUT, self._next_out, payload_type, payload)
        self._next_out += 1
        self._unacked[message.sequence_number] = _Outgoing(
            message, message.encode(), time.monotonic()
        )
        self._wake.set()

    async def _resend_due(self) -> None:
        """Send what is new or unacknowledged for RESEND_SECONDS, in order."""
        if not self._published.is_set():
            return
        now = time.monotonic()
        for outgoing in list(self._unacked.values()):
            if now - outgoing.last_sent < RESEND_SECONDS:
                continue
            if now - outgoing.first_sent > RESEND_GIVE_UP_SECONDS:
                self.reason = "Session Manager stopped acknowledging what the console sent."
                self.close()
                return
            if outgoing.last_sent:
                self.stats["resent"] += 1
            outgoing.last_sent = now
            await self._send_frame(outgoing.frame)

    async def _resend_forever(self) -> None:
        """The one task that sends stream messages, so they go in order."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESEND_SECONDS / 2):
                    await self._wake.wait()
            self._wake.clear()
            await self._resend_due()

    async def _send_frame(self, frame: bytes) -> None:
        if self._ws is None:
            return
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(frame)

    def _unacked_bytes(self) -> int:
        return sum(len(outgoing.message.payload) for outgoing in self._unacked.values())

    def _resume_senders_if_drained(self) -> None:
        if self._paused_senders and self._unacked_bytes() <= BACKEND_WRITE_LIMIT // 2:
            senders, self._paused_senders = self._paused_senders, []
            for sender in senders:
                sender.transport.resume_reading()

    # ---- flow control and closing ----------------------------------------------------------

    def pause_reading(self) -> None:
        if self._ws is not None and not self.closed and not self._reading_paused:
            self._reading_paused = True
            self._ws.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._ws is not None and self._reading_paused:
            self._reading_paused = False
            self._ws.transport.resume_reading()

    def close(self) -> None:
        """End the session: ask the agent to terminate, and Session Manager too."""
        if self.closed:
            return
        self.closed = True
        self.reason = self.reason or "The session was ended from the console."
        self._closing = asyncio.get_running_loop().create_task(self._close_session())

    async def _close_session(self) -> None:
        flag = struct.pack(">I", wire.TERMINATE_FLAG)
        message = wire.stream(wire.INPUT, self._next_out, PayloadType.FLAG, flag)
        self._next_out += 1
        await self._send_frame(message.encode())
        with contextlib.suppress(Exception):
            await self._terminate()
        if self._ws is not None:
            await self._ws.close()

    def _finish(self) -> None:
        was_open = not self.closed
        self.closed = True
        self.ended.set()
        senders, self._paused_senders = self._paused_senders, []
        for sender in senders:
            sender.transport.resume_reading()
        if was_open and self._ws is not None:
            asyncio.get_running_loop().create_task(self._ws.close())
        self._on_closed()


class ResumeRefused(Exception):
    """Session Manager will not resume the session (it ended, or access was taken away)."""


def _size_payload(cols: int, rows: int) -> bytes:
    return wire.json_payload({"cols": cols, "rows": rows})


def _closed_reason(message: AgentMessage) -> str:
    output = str(message.json().get("Output", ""))
    said = f": {output.strip()}" if output.strip() else "."
    return f"The session ended on the instance's side{said}"
