"""Recordings as the proxy writes them, and a serial hub that cannot line up with its log."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from instances.consoles.bridges.terminals import ALIGN_SEARCH_BYTES, TerminalHub
from instances.consoles.recording import Recorder, part_path


def test_a_recording_keeps_its_file_open_only_while_output_flows(tmp_path):
    cast = tmp_path / "session-1.cast"
    recorder = Recorder(cast, title="web-1 serial")
    assert recorder.fd == -1 and part_path(cast).exists()  # the header is written, then closed
    recorder.output(b"a" * Recorder.FLUSH_BYTES)  # a full batch: written, the file kept open
    assert recorder.fd >= 0
    recorder.output(b"login: ")
    recorder.flush()  # what the timer does once output slows: the file is let go
    assert recorder.fd == -1
    recorder.resize(100, 30)
    recorder.output(b"secret typed? no: output only\r\n")
    recorder.finish()

    lines = cast.read_text().splitlines()
    assert json.loads(lines[0])["title"] == "web-1 serial"
    events = [json.loads(line)[1:] for line in lines[1:]]
    assert events == [
        ["o", "a" * Recorder.FLUSH_BYTES],
        ["o", "login: "],
        ["r", "100x30"],
        ["o", "secret typed? no: output only\r\n"],
    ]
    assert not part_path(cast).exists() and recorder.fd == -1


def test_a_serial_hub_whose_log_lacks_the_output_holds_back_no_more_than_it_searches(tmp_path):
    """A log that never gets the socket's bytes (not QEMU's, or rotated) must not make the hub
    buffer everything while it retries: past ALIGN_SEARCH_BYTES it delivers what it holds."""
    serial_log = tmp_path / "serial.log"
    serial_log.write_bytes(b"old\r\n")

    async def run() -> TerminalHub:
        hub = TerminalHub(
            ("qemu", "i-1", "serial"),
            tmp_path / "unused.sock",
            serial_log=serial_log,
            history_bytes=4096,
            linger=0,
            on_gone=lambda hub: None,
        )
        hub.position = hub.log_start = 5
        hub._output(b"x" * 1024)  # not in the log: the hub waits for QEMU to log it
        assert hub.position == 5
        hub._output(b"y" * ALIGN_SEARCH_BYTES)
        return hub

    # a thread of its own: a browser test's Playwright may hold this thread's event loop
    with ThreadPoolExecutor(1) as pool:
        hub = pool.submit(asyncio.run, run()).result()
    assert hub.position == 5 + 1024 + ALIGN_SEARCH_BYTES  # delivered, without a gap
    assert hub.ring.endswith(b"y" * 100) and not hub._pending
