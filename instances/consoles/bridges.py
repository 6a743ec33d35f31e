"""Bridges between admitted websockets and the backends' console sockets.

Terminals (serial, exec): QEMU's chardev sockets accept one client at a time, so the proxy
holds one connection per machine and console kind, a TerminalHub, and fans its output out to
every viewer. One viewer at a time holds the keyboard: the first interactive viewer gets it, an
other interactive viewer gets it by an explicit "take" message, read-only viewers never do, and
bytes from anyone else are dropped before they reach the backend. A viewer who joins late first
gets recent output, then live bytes, without a gap or a repeat: what the hub itself delivered
(an in-memory ring), after the tail of the serial log from before the hub started, for serial.

VNC: QEMU's VNC server takes many clients, so each session has its own backend connection, with
the client's bytes passed through rfb.ClientFilter (read-only sessions send no input).

Websocket messages of terminal sessions: binary frames carry terminal bytes both ways; text
frames carry JSON control messages. From the browser: {"type": "take"}, {"type": "resize",
"cols": C, "rows": R} and {"type": "ping"} (answered with "pong"). From the proxy: "hello"
(who holds the keyboard, where the history starts), "keyboard", "viewers", "error" and "closed".
"""

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path

from websockets.asyncio.server import ServerConnection, broadcast
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

from instances.consoles.recording import Recorder
from instances.consoles.rfb import ClientFilter, RfbError
from instances.consoles.sessions import Admission

log = logging.getLogger("zopday.consoleproxy")

BACKEND_WRITE_LIMIT = 1 << 20
SLOW_VIEWER_SECONDS = 10  # a viewer whose buffer stays full this long is dropped, not waited for
CLOSE_BACKEND_GONE = 4410  # the browser reconnects with a fresh ticket, after a pause
# Serial hubs line the socket's bytes up with the serial log (TerminalHub._align).
ALIGN_BYTES, ALIGN_SECONDS, ALIGN_SEARCH_BYTES = 256, 0.05, 1 << 20
ALIGN_RETRY_SECONDS, ALIGN_RETRIES = 0.01, 100  # QEMU logs what it sent just after sending it


class Unavailable(Exception):
    """The backend's console socket cannot be reached (the machine is not running)."""


class BackendLink(asyncio.Protocol):
    """The proxy's end of one backend console socket, with write flow control."""

    def __init__(self, on_data: Callable[[bytes], None], on_closed: Callable[[], None]) -> None:
        self.on_data = on_data
        self.on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.closed = False
        self._on_resume: list[Callable[[], None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=BACKEND_WRITE_LIMIT)

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()
        self.on_closed()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        callbacks, self._on_resume = self._on_resume, []
        for callback in callbacks:
            callback()

    def write(self, data: bytes, sender: ServerConnection) -> None:
        """Write, and stop reading the sender's websocket while the backend is behind."""
        if self.transport is None or self.closed:
            return
        self.transport.write(data)
        if self.paused:
            sender.transport.pause_reading()
            self._on_resume.append(sender.transport.resume_reading)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_link(
    path: Path, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
) -> BackendLink:
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_unix_connection(
            lambda: BackendLink(on_data, on_closed), str(path)
        )
    except OSError as error:
        raise Unavailable("The console is not available: is the instance running?") from error
    return link


class OutputPump:
    """Sends backend output to websockets; when one of them cannot keep up, stops reading the
    backend until it drains, and drops it if it stays stuck."""

    def __init__(self, link_getter: Callable[[], BackendLink | None]) -> None:
        self._link = link_getter
        self._waiting: asyncio.Task[None] | None = None

    def send(self, connections: list[ServerConnection], data: bytes) -> None:
        broadcast(connections, data)
        if self._waiting is None and any(ws.paused for ws in connections):
            link = self._link()
            if link is not None and link.transport is not None:
                link.transport.pause_reading()
            self._waiting = asyncio.get_running_loop().create_task(self._wait(connections))

    async def _wait(self, connections: list[ServerConnection]) -> None:
        try:
            stuck = [ws for ws in connections if ws.paused]
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(ws.drain()) for ws in stuck], timeout=SLOW_VIEWER_SECONDS
            )
            for task in pending:
                task.cancel()
            for ws in stuck:
                if ws.paused:
                    ws.transport.abort()  # too slow: it reconnects and catches up from history
        finally:
            self._waiting = None
            link = self._link()
            if link is not None and link.transport is not None and not link.closed:
                link.transport.resume_reading()


class ConsoleConnection(ServerConnection):
    """A websocket that hands each complete message to its session's `sink` right from
    data_received, instead of queueing it for the handler task: one event-loop hop less per
    keystroke. Fragmented messages (browsers do not send them) still go through the queue."""

    sink: Callable[[bytes | str], None] | None = None

    def process_event(self, event: Event) -> None:
        sink = self.sink
        if sink is not None and isinstance(event, Frame) and event.fin:
            if event.opcode is Opcode.BINARY:
                sink(bytes(event.data))
                return
            if event.opcode is Opcode.TEXT:
                sink(bytes(event.data).decode(errors="replace"))
                return
        super().process_event(event)


class Viewer:
    """One websocket watching (and maybe typing into) a terminal hub."""

    __slots__ = ("admission", "bytes_in", "bytes_out", "dropped", "recorder", "ws")

    def __init__(self, ws: ServerConnection, admission: Admission, recorder: Recorder | None):
        self.ws = ws
        self.admission = admission
        self.recorder = recorder
        self.bytes_in = 0  # to the guest
        self.bytes_out = 0  # to the browser
        self.dropped = 0  # typed without the keyboard, never sent

    @property
    def name(self) -> str:
        return self.admission.username


class TerminalHub:
    """The one backend connection of a terminal console, shared by all its viewers."""

    def __init__(
        self,
        key: tuple[str, str, str],
        socket_path: Path,
        *,
        serial_log: Path | None,
        history_bytes: int,
        linger: float,
        on_gone: Callable[["TerminalHub"], None],
    ) -> None:
        self.key = key
        self.socket_path = socket_path
        self.serial_log = serial_log
        self.history_bytes = history_bytes
        self.linger = linger
        self.on_gone = on_gone
        self.viewers: list[Viewer] = []
        self.holder: Viewer | None = None
        self.link: BackendLink | None = None
        self.position = 0  # stream offset of the next byte (from a serial log offset for serial)
        self.epoch = ""  # names the stream that positions count in
        self.log_start = 0  # serial: the log's size when the hub started; older output is the log's
        # the latest output the hub delivered (history_bytes of it): the history, after the log's
        # part from before the hub for serial
        self.ring = bytearray()
        self.pump = OutputPump(lambda: self.link)
        self._linger_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._aligned = serial_log is None
        self._pending = bytearray()
        self._align_timer: asyncio.TimerHandle | None = None
        self._align_retries = 0

    async def start(self) -> None:
        if self.serial_log is not None:
            try:
                stat = self.serial_log.stat()
                self.position, self.epoch = stat.st_size, f"log-{stat.st_ino}"
            except OSError:
                self.position, self.epoch = 0, "log-new"
            self.log_start = self.position
        else:
            self.epoch = f"mem-{secrets.token_hex(4)}"
        self.link = await open_link(self.socket_path, self._output, self._backend_closed)

    # ---- viewers -------------------------------------------------------------------------

    def join(self, viewer: Viewer) -> None:
        """Greet the viewer with the history, then it gets live output (synchronous, so no
        output can slip in between)."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        history = self._history()
        self.viewers.append(viewer)
        if self.holder is None and not viewer.admission.read_only:
            self.holder = viewer
        self._send_json(
            [viewer.ws],
            {
                "type": "hello",
                "kind": viewer.admission.kind.name,
                "read_only": viewer.admission.read_only,
                "epoch": self.epoch,
                "position": self.position,
                "history": len(history),
                **self._keyboard_state(viewer),
                "viewers": len(self.viewers),
            },
        )
        if history:
            broadcast([viewer.ws], history)
            viewer.bytes_out += len(history)
            if viewer.recorder is not None:
                viewer.recorder.output(history)
        self._announce_viewers()

    def leave(self, viewer: Viewer) -> None:
        if viewer in self.viewers:
            self.viewers.remove(viewer)
        if self.holder is viewer:
            self.holder = None
            self._announce_keyboard()
        self._announce_viewers()
        if not self.viewers and not self._closed:
            if self.linger > 0:
                loop = asyncio.get_running_loop()
                self._linger_timer = loop.call_later(self.linger, self._close_if_idle)
            else:
                self.close()

    def take_keyboard(self, viewer: Viewer) -> None:
        if viewer.admission.read_only:
            self._send_json(
                [viewer.ws],
                {"type": "error", "message": "A read-only session cannot take the keyboard."},
            )
            return
        self.holder = viewer
        self._announce_keyboard()

    def receive(self, viewer: Viewer, message: bytes | str) -> None:
        """A message from a viewer: keystrokes (binary) or a control message (text)."""
        if isinstance(message, bytes):
            self.type(viewer, message)
        else:
            self.control(viewer, message)

    def type(self, viewer: Viewer, data: bytes) -> None:
        """Send keystrokes to the guest, if this viewer holds the keyboard; drop them if not."""
        if viewer is not self.holder or viewer.admission.read_only or self.link is None:
            viewer.dropped += len(data)
            return
        viewer.bytes_in += len(data)
        self.link.write(data, viewer.ws)

    def control(self, viewer: Viewer, text: str) -> None:
        try:
            message = json.loads(text)
            kind = message.get("type")
        except (ValueError, AttributeError):
            return
        if kind == "take":
            self.take_keyboard(viewer)
        elif kind == "ping":
            self._send_json([viewer.ws], {"type": "pong"})
        elif kind == "resize" and viewer.recorder is not None:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                cols, rows = int(message["cols"]), int(message["rows"])
                if 0 < cols <= 1000 and 0 < rows <= 1000:
                    viewer.recorder.resize(cols, rows)

    # ---- backend -------------------------------------------------------------------------

    def _output(self, data: bytes) -> None:
        if not self._aligned:
            self._pending += data
            if len(self._pending) >= ALIGN_BYTES and not self._align_retries:
                self._align()
            elif self._align_timer is None:
                loop = asyncio.get_running_loop()
                self._align_timer = loop.call_later(ALIGN_SECONDS, self._align)
            return
        self._deliver(data)

    def _align(self, *, final: bool = False) -> None:
        """Make the stream the serial log itself, from where the hub started.

        QEMU logs what the guest prints even while no client is connected, so what it printed
        between the moment the log size was read and the moment QEMU accepted our connection
        is in the log but never comes through the socket. The first bytes that do come
        (ALIGN_BYTES of them, or what came within ALIGN_SECONDS) are looked up in the log, and
        the gap in front of them is filled from the log. QEMU writes the log just after the
        socket, so bytes not in the log yet are looked up again a moment later (until the
        backend closes, or ALIGN_RETRIES times). The stream then goes on from the log's offset
        where the hub started, which a page reconnecting to a later hub of the same log relies
        on. (Not byte for byte from then on: _history says why, and does not rely on it.)
        """
        if self._align_timer is not None:
            self._align_timer.cancel()
            self._align_timer = None
        pending = bytes(self._pending)
        gap = b""
        if self.serial_log is not None and pending:
            try:
                with open(self.serial_log, "rb") as serial_log:
                    serial_log.seek(self.position)
                    logged = serial_log.read(ALIGN_SEARCH_BYTES)
            except OSError:
                logged = b""
            skipped = logged.find(pending[:ALIGN_BYTES])
            if skipped < 0 and not final and self._align_retries < ALIGN_RETRIES:
                self._align_retries += 1
                loop = asyncio.get_running_loop()
                self._align_timer = loop.call_later(ALIGN_RETRY_SECONDS, self._align)
                return
            if skipped > 0:
                gap = logged[:skipped]
        self._aligned = True
        self._pending = bytearray()
        if gap or pending:
            self._deliver(gap + pending)

    def _deliver(self, data: bytes) -> None:
        self.position += len(data)
        self.ring += data
        if len(self.ring) > self.history_bytes:
            del self.ring[: len(self.ring) - self.history_bytes]
        viewers = self.viewers
        if not viewers:
            return
        self.pump.send([viewer.ws for viewer in viewers], data)
        for viewer in viewers:
            viewer.bytes_out += len(data)
            if viewer.recorder is not None:
                viewer.recorder.output(data)

    def _backend_closed(self) -> None:
        if not self._aligned:
            self._align(final=True)
        if self._closed:
            return
        self._closed = True
        self.on_gone(self)
        for viewer in list(self.viewers):
            self._send_json([viewer.ws], {"type": "closed", "reason": "The console closed."})
            asyncio.get_running_loop().create_task(
                viewer.ws.close(CLOSE_BACKEND_GONE, "The console closed.")
            )

    def _close_if_idle(self) -> None:
        self._linger_timer = None
        if not self.viewers:
            self.close()

    def close(self) -> None:
        if self._align_timer is not None:
            self._align_timer.cancel()
            self._align_timer = None
        if not self._closed:
            self._closed = True
            self.on_gone(self)
        if self.link is not None:
            self.link.close()

    # ---- helpers -------------------------------------------------------------------------

    def _history(self) -> bytes:
        """The history_bytes before position, exactly what the viewers were sent: viewers count
        from its length where their screen resumes. That is the ring; for serial, while the
        hub has delivered less than history_bytes, it comes after the log's tail from before
        the hub started (the log holds the output from before any viewer).

        Never the log from where the hub started on: QEMU's log is not a copy of the socket's
        stream. When the socket is full, QEMU logs a byte as it fails to send it (EAGAIN) and
        again when the serial port sends it again, and it logs bytes it gives up sending; with
        a proxy that lags during a boot's flood of output, the log gains bytes the hub never
        got, and a history read from the log at the hub's positions would miss its last bytes.
        """
        ring = bytes(self.ring)
        wanted = self.history_bytes - len(ring)  # > 0: the ring holds all the hub delivered
        if self.serial_log is None or wanted <= 0 or self.log_start <= 0:
            return ring
        start = max(0, self.log_start - wanted)
        try:
            with open(self.serial_log, "rb") as serial_log:
                serial_log.seek(start)
                logged = serial_log.read(self.log_start - start)
        except OSError:
            logged = b""
        return logged + ring

    def _keyboard_state(self, viewer: Viewer) -> dict[str, object]:
        holder = self.holder
        return {"mine": holder is viewer, "holder": holder.name if holder is not None else ""}

    def _announce_keyboard(self) -> None:
        for viewer in self.viewers:
            self._send_json([viewer.ws], {"type": "keyboard", **self._keyboard_state(viewer)})

    def _announce_viewers(self) -> None:
        self._send_json(
            [viewer.ws for viewer in self.viewers],
            {"type": "viewers", "viewers": len(self.viewers)},
        )

    @staticmethod
    def _send_json(connections: list[ServerConnection], message: dict[str, object]) -> None:
        broadcast(connections, json.dumps(message))


class HubRegistry:
    """The open terminal hubs, one per (backend, machine, console kind)."""

    def __init__(self, *, history_bytes: int, linger: float) -> None:
        self.history_bytes = history_bytes
        self.linger = linger
        self.hubs: dict[tuple[str, str, str], TerminalHub] = {}
        self._starting: dict[tuple[str, str, str], asyncio.Future[TerminalHub]] = {}

    async def hub(
        self, key: tuple[str, str, str], socket_path: Path, serial_log: Path | None
    ) -> TerminalHub:
        if key in self.hubs:
            return self.hubs[key]
        if key in self._starting:
            return await asyncio.shield(self._starting[key])
        future: asyncio.Future[TerminalHub] = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        hub = TerminalHub(
            key,
            socket_path,
            serial_log=serial_log,
            history_bytes=self.history_bytes,
            linger=self.linger,
            on_gone=self._forget,
        )
        try:
            await hub.start()
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: waiters re-raise it
            raise
        else:
            self.hubs[key] = hub
            future.set_result(hub)
            return hub
        finally:
            del self._starting[key]

    def _forget(self, hub: TerminalHub) -> None:
        if self.hubs.get(hub.key) is hub:
            del self.hubs[hub.key]

    def close_all(self) -> None:
        for hub in list(self.hubs.values()):
            hub.close()


async def run_terminal(ws: ServerConnection, hub: TerminalHub, viewer: Viewer) -> str:
    """Serve one terminal viewer until it or the backend goes away; returns why it ended."""
    hub.join(viewer)
    if isinstance(ws, ConsoleConnection):
        ws.sink = lambda message: hub.receive(viewer, message)
    try:
        async for message in ws:  # only what the sink did not take
            hub.receive(viewer, message)
    except ConnectionClosed:
        pass
    finally:
        if isinstance(ws, ConsoleConnection):
            ws.sink = None
        hub.leave(viewer)
    return _close_reason(ws)


async def run_vnc(
    ws: ServerConnection, admission: Admission, socket_path: Path
) -> tuple[str, int, int]:
    """Serve one VNC session on its own backend connection; returns (reason, bytes to the
    guest, bytes to the browser)."""
    counts = [0, 0]
    link: BackendLink | None = None
    client = ClientFilter(read_only=admission.read_only)

    def output(data: bytes) -> None:
        counts[1] += len(data)
        pump.send([ws], data)

    def closed() -> None:
        asyncio.get_running_loop().create_task(ws.close(CLOSE_BACKEND_GONE, "The console closed."))

    def receive(message: bytes | str) -> None:
        if isinstance(message, str) or link is None or link.closed:
            return  # text frames are the page's keepalive pings
        try:
            data = client.feed(message)
        except RfbError as error:
            log.warning("VNC session %s: %s", admission.session_id, error)
            link.close()
            asyncio.get_running_loop().create_task(ws.close(1008, "Unexpected VNC message."))
            return
        if data:
            counts[0] += len(data)
            link.write(data, ws)

    pump = OutputPump(lambda: link)
    link = await open_link(socket_path, output, closed)
    if isinstance(ws, ConsoleConnection):
        ws.sink = receive
    try:
        async for message in ws:
            receive(message)
    except ConnectionClosed:
        pass
    finally:
        if isinstance(ws, ConsoleConnection):
            ws.sink = None
        link.close()
    return _close_reason(ws), counts[0], counts[1]


def _close_reason(ws: ServerConnection) -> str:
    if ws.close_code is None:
        return "closed"
    return f"{ws.close_code} {ws.close_reason}".strip()
