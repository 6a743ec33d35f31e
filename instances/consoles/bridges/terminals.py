"""Terminal consoles (serial, exec): QEMU's chardev sockets take one client at a time, so one
TerminalHub per machine and kind fans its output out to every viewer. One viewer at a time holds
the keyboard (the first interactive one, or whoever sends "take"); others' bytes are dropped.

Websocket messages: binary frames carry terminal bytes both ways, text frames JSON: from the
browser "take", "resize" (cols, rows), "end" and "ping"; from the proxy "hello" (keyboard,
history start, whether "end" applies), "keyboard", "viewers", "error", "closed" and "pong".
A backend channel that is a session of its own (a cloud's exec channel) takes the keyboard
holder's terminal size, and ends when the holder presses End.
"""

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast

from instances.backends.base import ConsoleEndpoint
from instances.consoles.recording import Recorder
from instances.consoles.sessions import Admission

from .endpoints import open_link
from .links import (
    CLOSE_BACKEND_GONE,
    CLOSE_SESSION_ENDED,
    Link,
    OutputPump,
    clipped,
)

# Serial hubs line the socket's bytes up with the serial log (TerminalHub._align).
ALIGN_BYTES, ALIGN_SECONDS, ALIGN_SEARCH_BYTES = 256, 0.05, 1 << 20
ALIGN_RETRY_SECONDS, ALIGN_RETRIES = 0.01, 100  # QEMU logs what it sent just after sending it


class Viewer:
    """One websocket watching (and maybe typing into) a terminal hub."""

    __slots__ = ("admission", "bytes_in", "bytes_out", "dropped", "recorder", "size", "ws")

    def __init__(self, ws: ServerConnection, admission: Admission, recorder: Recorder | None):
        self.ws = ws
        self.admission = admission
        self.recorder = recorder
        self.bytes_in = 0  # to the guest
        self.bytes_out = 0  # to the browser
        self.dropped = 0  # typed without the keyboard, never sent
        self.size: tuple[int, int] | None = None  # the viewer's terminal: cols, rows

    @property
    def name(self) -> str:
        return self.admission.username


class TerminalHub:
    """The one backend connection of a terminal console, shared by all its viewers; one who
    joins late gets recent output first, then live bytes, without a gap or a repeat."""

    def __init__(
        self,
        key: tuple[str, str, str],
        socket_path: ConsoleEndpoint,
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
        self.link: Link | None = None
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
                "ends": self._session_link() is not None,
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
        self._apply_size()

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
        elif kind == "resize":
            with contextlib.suppress(KeyError, TypeError, ValueError):
                cols, rows = int(message["cols"]), int(message["rows"])
                if 0 < cols <= 1000 and 0 < rows <= 1000:
                    viewer.size = (cols, rows)
                    if viewer.recorder is not None:
                        viewer.recorder.resize(cols, rows)
                    if viewer is self.holder:
                        self._apply_size()
        elif kind == "end":
            self.end(viewer)

    def end(self, viewer: Viewer) -> None:
        """The keyboard holder ends a session channel for every viewer."""
        link = self._session_link()
        if link is None or viewer is not self.holder or viewer.admission.read_only:
            self._send_json(
                [viewer.ws],
                {"type": "error", "message": "Only the keyboard holder can end this session."},
            )
            return
        link.reason = f"{viewer.name} ended the session."
        link.close()

    def _session_link(self) -> Any:
        """The link, if it is a session of its own (it has a size and an end)."""
        link = self.link
        return link if link is not None and hasattr(link, "resize") else None

    def _apply_size(self) -> None:
        link = self._session_link()
        holder = self.holder
        if link is not None and holder is not None and holder.size is not None:
            link.resize(*holder.size)

    # ---- backend -------------------------------------------------------------------------

    def _output(self, data: bytes) -> None:
        if not self._aligned:
            self._pending += data
            if len(self._pending) > ALIGN_SEARCH_BYTES:  # not logged, it seems: hold no more
                self._align(final=True)
            elif len(self._pending) >= ALIGN_BYTES and not self._align_retries:
                self._align()
            elif self._align_timer is None:
                loop = asyncio.get_running_loop()
                self._align_timer = loop.call_later(ALIGN_SECONDS, self._align)
            return
        self._deliver(data)

    def _align(self, *, final: bool = False) -> None:
        """Fill the gap QEMU logged before it accepted our connection: find the first bytes in
        the log (again shortly, as QEMU logs just after sending) and deliver the log's bytes in
        front of them, so the stream counts from the log's offset where the hub started."""
        if self._align_timer is not None:
            self._align_timer.cancel()
            self._align_timer = None
        gap = b""
        if self.serial_log is not None and self._pending:
            try:
                with open(self.serial_log, "rb") as serial_log:
                    serial_log.seek(self.position)
                    logged = serial_log.read(ALIGN_SEARCH_BYTES)
            except OSError:
                logged = b""
            skipped = logged.find(self._pending[:ALIGN_BYTES])  # the head only, not a copy
            if skipped < 0 and not final and self._align_retries < ALIGN_RETRIES:
                self._align_retries += 1
                loop = asyncio.get_running_loop()
                self._align_timer = loop.call_later(ALIGN_RETRY_SECONDS, self._align)
                return
            if skipped > 0:
                gap = logged[:skipped]
        self._aligned = True
        pending, self._pending = self._pending, bytearray()
        if gap or pending:
            self._deliver(gap + pending if gap else bytes(pending))

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
        session = self._session_link()
        reason = (getattr(session, "reason", "") if session else "") or "The console closed."
        code = CLOSE_SESSION_ENDED if session is not None else CLOSE_BACKEND_GONE
        for viewer in list(self.viewers):
            self._send_json([viewer.ws], {"type": "closed", "reason": reason})
            asyncio.get_running_loop().create_task(viewer.ws.close(code, clipped(reason)))

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
        """The last history_bytes the viewers were sent (the ring, after the log's tail from
        before the hub for serial). Never the log past that point: QEMU logs bytes it failed or
        gave up sending, so it is no copy of the socket's stream."""
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
