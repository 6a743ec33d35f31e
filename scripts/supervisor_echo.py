"""A supervisor event listener for `bin/zop run`: the supervised processes' output on the terminal.

Each line goes out after its program's name ("web        | ..."), as the processes write it; the
same output is also kept in the run folder's log/ files. Protocol: supervisor's eventlistener docs.
"""

import signal
import sys


def fields(line: bytes) -> dict[str, str]:
    return dict(token.split(":", 1) for token in line.decode(errors="replace").split())


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # supervisord stops it last, asked
    events, answers, terminal = sys.stdin.buffer, sys.stdout, sys.stderr
    partial: dict[str, str] = {}  # a line a process has not finished writing yet
    while True:
        answers.write("READY\n")
        answers.flush()
        header = events.readline()
        if not header:
            return
        payload = events.read(int(fields(header)["len"]))
        head, _, data = payload.partition(b"\n")
        name = fields(head).get("processname", "?")
        text = partial.pop(name, "") + data.decode(errors="replace")
        *lines, rest = text.split("\n")
        if rest:
            partial[name] = rest
        for line in lines:
            terminal.write(f"{name:<12} | {line.rstrip()}\n")
        terminal.flush()
        answers.write("RESULT 2\nOK")
        answers.flush()


if __name__ == "__main__":
    main()
