"""asciicast v2 recordings of terminal sessions' output.

Each output chunk is appended raw to `<name>.cast.part` (16-byte header and bytes, batched) to
keep recording cheap. At session end, or at first download or replay if the proxy died, that
becomes the asciicast v2 file: a JSON header, then `[seconds, "o", text]` per chunk and
`[seconds, "r", "COLSxROWS"]` per resize. Keystrokes are not kept: they may hold passwords.
"""

import asyncio
import codecs
import contextlib
import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

RECORD = struct.Struct("<dcxxxI")  # seconds since start, event type, 3 pad bytes, length
OUTPUT, RESIZE = b"o", b"r"


def part_path(cast: Path) -> Path:
    return cast.with_name(cast.name + ".part")


class Recorder:
    """Appends one session's output to its part file; finish() writes the asciicast file.

    Records are gathered in memory and written at most every FLUSH_SECONDS or FLUSH_BYTES, so a
    busy console costs one write per batch rather than one per chunk. The file is open only
    while output flows: an idle session holds no file descriptor (10,000 sessions would).
    """

    FLUSH_SECONDS = 0.25
    FLUSH_BYTES = 64 * 1024

    __slots__ = ("buffer", "cast", "cols", "fd", "finished", "rows", "started", "timer", "title")

    def __init__(self, cast: Path, *, title: str, cols: int = 80, rows: int = 24) -> None:
        self.cast = cast
        self.title = title
        self.cols, self.rows = cols, rows
        self.started = time.time()
        self.buffer = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        self.fd, self.finished = -1, False
        cast.parent.mkdir(parents=True, exist_ok=True)
        header = json.dumps(
            {
                "version": 2,
                "width": cols,
                "height": rows,
                "timestamp": int(self.started),
                "title": title,
                "env": {"TERM": "xterm-256color"},
            }
        ).encode()
        fd = os.open(part_path(cast), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, struct.pack("<I", len(header)) + header)
        finally:
            os.close(fd)

    def output(self, data: bytes) -> None:
        self._add(OUTPUT, data)

    def resize(self, cols: int, rows: int) -> None:
        self._add(RESIZE, f"{cols}x{rows}".encode())

    def _add(self, kind: bytes, payload: bytes) -> None:
        self.buffer += RECORD.pack(time.time() - self.started, kind, len(payload))
        self.buffer += payload
        if len(self.buffer) >= self.FLUSH_BYTES:
            self._write()  # output flows: the file stays open
        elif self.timer is None:
            with contextlib.suppress(RuntimeError):  # no event loop: flushed by finish()
                self.timer = asyncio.get_running_loop().call_later(self.FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        """Write what is gathered and close the file (the timer's flush: output has slowed)."""
        self._write()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _write(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.buffer and not self.finished:
            if self.fd < 0:
                self.fd = os.open(part_path(self.cast), os.O_WRONLY | os.O_APPEND)
            os.write(self.fd, self.buffer)
            self.buffer = bytearray()

    def finish(self) -> None:
        """Close the part file and turn it into the asciicast file (blocking: run it in a
        thread for long sessions)."""
        if self.finished:
            return
        self.flush()
        self.finished = True
        finish_recording(self.cast)


def finish_recording(cast: Path) -> bool:
    """Write `cast` from its part file and remove the part file; False if there is none."""
    part = part_path(cast)
    if not part.exists():
        return False
    tmp = cast.with_name(cast.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in _asciicast_lines(part):
                out.write(line)
    except struct.error:  # cut off before its header was whole: nothing to replay
        tmp.unlink(missing_ok=True)
        return False
    os.replace(tmp, cast)
    part.unlink()
    return True


def _asciicast_lines(part: Path) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    with open(part, "rb") as raw:
        (length,) = struct.unpack("<I", raw.read(4))
        yield raw.read(length).decode() + "\n"
        while len(head := raw.read(RECORD.size)) == RECORD.size:
            seconds, kind, size = RECORD.unpack(head)
            payload = raw.read(size)
            if len(payload) < size:  # cut short by a crash: keep what is whole
                break
            if kind == OUTPUT:
                text = decoder.decode(payload)
                if text:
                    yield json.dumps([round(seconds, 6), "o", text]) + "\n"
            elif kind == RESIZE:
                yield json.dumps([round(seconds, 6), "r", payload.decode()]) + "\n"
