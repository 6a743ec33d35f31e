"""A supervisor event listener for `bin/zop run`: the supervised processes' output on the terminal.

Each line goes out after its program's name ("web        | ..."), as the processes write it; the
same output is also kept in the run folder's log/ files. Protocol: supervisor's eventlistener docs.
"""

import ast
import codecs
import signal
import sys
from typing import BinaryIO

# How supervisor sends output that is not UTF-8: the repr of its bytes after this.
UNDECODABLE = "Undecodable: "


def fields(line: str) -> dict[str, str]:
    return dict(token.split(":", 1) for token in line.split() if ":" in token)


def read_payload(events: BinaryIO, length: int) -> str:
    """The event's payload. supervisor counts its `len` in characters, not in the UTF-8 bytes it
    sends, so a byte count would stop short at the first accented letter and lose the framing."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = ""
    while len(text) < length:
        # each character left takes a byte at least: this never reads into the next event
        chunk = events.read(length - len(text))
        if not chunk:
            break
        text += decoder.decode(chunk)
    return text


def output_bytes(data: str) -> bytes:
    """What the process wrote: a character cut in two by a read is whole again once the next
    event's bytes join it, and what is not UTF-8 at all becomes U+FFFD when shown."""
    if data.startswith(UNDECODABLE):
        try:
            raw = ast.literal_eval(data.removeprefix(UNDECODABLE))
        except (ValueError, SyntaxError):
            raw = None
        if isinstance(raw, bytes):
            return raw
    return data.encode()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # supervisord stops it last, asked
    events, answers, terminal = sys.stdin.buffer, sys.stdout, sys.stderr
    partial: dict[str, bytes] = {}  # a line a process has not finished writing yet
    while True:
        answers.write("READY\n")
        answers.flush()
        header = events.readline()
        if not header:
            return
        length = int(fields(header.decode(errors="replace")).get("len", "0"))
        head, _, data = read_payload(events, length).partition("\n")
        name = fields(head).get("processname", "?")
        *lines, rest = (partial.pop(name, b"") + output_bytes(data)).split(b"\n")
        if rest:
            partial[name] = rest
        for line in lines:
            terminal.write(f"{name:<12} | {line.decode(errors='replace').rstrip()}\n")
        terminal.flush()
        answers.write("RESULT 2\nOK")
        answers.flush()


if __name__ == "__main__":
    main()
