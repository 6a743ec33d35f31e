"""scripts/supervisor_echo.py: the listener that puts the processes' output on the terminal keeps
going whatever bytes they write, fed events exactly as supervisord frames them."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from supervisor import events
from supervisor.process import EventListenerPool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "supervisor_echo.py"


def envelope(name: str, output: bytes, serial: int) -> bytes:
    """A PROCESS_LOG_STDOUT event for `output` as supervisord 4 writes it to a listener."""
    config = SimpleNamespace(name=name)
    process = SimpleNamespace(config=config, group=None)
    payload = events.ProcessLogStdoutEvent(process, 4242, output).payload()
    pool = SimpleNamespace(
        config=SimpleNamespace(name="log", options=SimpleNamespace(identifier="supervisor"))
    )
    text = EventListenerPool._eventEnvelope(
        pool, events.EventTypes.PROCESS_LOG_STDOUT, serial, serial, payload
    )
    return text.encode()


def test_undecodable_and_accented_output_does_not_kill_the_listener():
    listener = subprocess.Popen(
        [sys.executable, str(SCRIPT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    outputs = [
        b"raw \xff\xfe bytes\nand the next line\n",
        "caf\u00e9 \u2615 na\u00efve\n".encode(),
        b"half a line, ",
        b"finished\n",
        b"cut in the middle of caf\xc3",  # a read may end inside a character
        b"\xa9\n",
    ]
    for serial, output in enumerate(outputs):
        assert listener.stdout.readline() == b"READY\n"
        listener.stdin.write(envelope("web", output, serial))
        listener.stdin.flush()
        assert listener.stdout.read(len(b"RESULT 2\nOK")) == b"RESULT 2\nOK"
    assert listener.stdout.readline() == b"READY\n"  # alive, asking for the next event
    listener.stdin.close()
    assert listener.wait(timeout=30) == 0
    shown = listener.stderr.read().decode().splitlines()
    assert shown == [
        "web          | raw \ufffd\ufffd bytes",
        "web          | and the next line",
        "web          | caf\u00e9 \u2615 na\u00efve",
        "web          | half a line, finished",
        "web          | cut in the middle of caf\u00e9",
    ]
