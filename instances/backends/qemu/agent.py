"""A client for the QEMU guest agent (qemu-ga) behind the machine's `qga.sock`.

The agent speaks newline-delimited JSON over a virtio-serial port. The host end of that port is a
plain byte stream: replies to an earlier client that gave up may still be in it, and the agent's
parser may hold half a command. Every session therefore starts with 0xFF (which resets the agent's
parser) and `guest-sync-delimited` with a random id, and drops everything up to the matching reply.
"""

import base64
import contextlib
import dataclasses
import json
import random
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from instances.backends.base import BackendError, GuestFacts, GuestInterface

SENTINEL = b"\xff"
MAX_REPLY = 64 * 1024 * 1024  # a guest-exec's captured output, base64: qemu-ga caps it at 16 MiB
IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # a Linux interface name that is safe in a path


class GuestAgent:
    """One machine's guest agent; each method opens its own short session."""

    def __init__(self, socket_path: Path, *, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def call(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        with _Session(self.socket_path, self.timeout) as session:
            return session.call(command, arguments)

    def ping(self) -> None:
        self.call("guest-ping")

    def reboot(self, *, refusal_wait: float = 0.5) -> None:
        """Ask the guest OS to reboot (qemu-ga runs its shutdown command). The agent answers
        only a refusal, so one is waited for a moment; silence means the guest is on its way."""
        with _Session(self.socket_path, self.timeout) as session:
            session.send_command("guest-shutdown", {"mode": "reboot"})
            if (reason := session.refusal("guest-shutdown", refusal_wait)) is not None:
                raise BackendError(f"The guest agent refused guest-shutdown: {reason}")

    def facts(self) -> GuestFacts:
        """Hostname and interfaces are required; carriers, OS, memory and filesystems are best
        effort (an agent may have guest-file-*, guest-exec or guest-get-fsinfo disabled, a
        guest may lack `cat`)."""
        with _Session(self.socket_path, self.timeout) as session, _reading("the guest's facts"):
            hostname = session.call("guest-get-host-name")["host-name"]
            interfaces = tuple(
                dataclasses.replace(interface, carrier=session.carrier(interface.name))
                for interface in _interfaces(session.call("guest-network-get-interfaces"))
            )
            try:
                filesystems = _filesystems(session.call("guest-get-fsinfo"))
            except BackendError:
                filesystems = ()
            try:
                os_info = session.call("guest-get-osinfo")
                os_name = str(os_info.get("pretty-name") or os_info.get("name") or "")
            except BackendError:
                os_name = ""
            try:
                # guest-get-memory-block-info only gives the block size: read /proc/meminfo
                memory = _meminfo(session.execute(["cat", "/proc/meminfo"], self.timeout)[1])
            except BackendError:
                memory = {}
        return GuestFacts(
            hostname=hostname,
            os=os_name,
            interfaces=interfaces,
            memory_total_kb=memory.get("MemTotal", 0),
            memory_available_kb=memory.get("MemAvailable", 0),
            filesystems=filesystems,
        )

    def freeze(self) -> int:
        """Freeze the guest's filesystems; the number frozen."""
        return _count(self.call("guest-fsfreeze-freeze"), "guest-fsfreeze-freeze")

    def thaw(self) -> int:
        return _count(self.call("guest-fsfreeze-thaw"), "guest-fsfreeze-thaw")

    def freeze_status(self) -> str:
        """ "thawed" or "frozen"."""
        return str(self.call("guest-fsfreeze-status"))

    def execute(self, argv: list[str], timeout: float = 10) -> tuple[int, str]:
        """Run argv in the guest (PATH is searched); exit code and stdout+stderr."""
        with _Session(self.socket_path, self.timeout) as session:
            return session.execute(argv, timeout)


class _Session:
    def __init__(self, socket_path: Path, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.buffer = bytearray()

    def __enter__(self) -> "_Session":
        self.sock.settimeout(self.timeout)
        try:
            self.sock.connect(str(self.socket_path))
        except OSError as error:
            self.sock.close()
            raise BackendError(
                f"The guest agent socket is not available ({error.strerror or error}).",
                retryable=True,
            ) from error
        self._sync()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def call(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        self.send_command(command, arguments)
        reply = _reply(self._read_line(command), command)
        if "error" in reply:
            raise BackendError(f"The guest agent refused {command}: {reply['error'].get('desc')}")
        return reply.get("return")

    def send_command(self, command: str, arguments: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        self._send(json.dumps(message).encode() + b"\n")

    def refusal(self, command: str, wait: float) -> str | None:
        """For a command the agent answers only to refuse: the reason, or None when nothing
        came within `wait` seconds (or the guest closed the port, going down)."""
        try:
            reply = _reply(self._read_line(command, time.monotonic() + wait), command)
        except BackendError:
            return None
        error = reply.get("error")
        return str(error.get("desc") if isinstance(error, dict) else error) if error else None

    def carrier(self, interface: str) -> bool | None:
        """Whether the guest's driver sees a carrier on `interface` (Linux's sysfs says, read
        through the agent's file commands); None when the guest does not say: no such file
        (not Linux), the interface is down in the guest (reading it fails), or the agent
        refuses file commands."""
        if not IFNAME.fullmatch(interface):
            return None
        try:
            handle = self.call("guest-file-open", {"path": f"/sys/class/net/{interface}/carrier"})
            try:
                data = self.call("guest-file-read", {"handle": handle, "count": 16})
            finally:
                self.call("guest-file-close", {"handle": handle})
            text = base64.b64decode(data["buf-b64"]).strip()
        except BackendError as error:
            if error.retryable:  # the connection failed: the session is done, not the file
                raise
            return None
        except (KeyError, TypeError, ValueError):
            return None
        return {b"1": True, b"0": False}.get(text)

    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
        if not argv:
            raise BackendError("Nothing to run: the command is empty.")
        with _reading("guest-exec"):
            arguments = {"path": argv[0], "arg": argv[1:], "capture-output": True}
            pid = self.call("guest-exec", arguments)["pid"]
        deadline = time.monotonic() + timeout
        while True:
            with _reading("guest-exec-status"):
                status = self.call("guest-exec-status", {"pid": pid})
                if status["exited"]:
                    output = b"".join(
                        base64.b64decode(status.get(key, "")) for key in ("out-data", "err-data")
                    )
                    # killed by a signal: no exit code; report -signal, like subprocess
                    code = status["exitcode"] if "exitcode" in status else -status.get("signal", 1)
                    return int(code), output.decode(errors="replace")
            if time.monotonic() > deadline:
                raise BackendError(f"{argv[0]} did not finish within {timeout:g} s in the guest.")
            time.sleep(0.1)

    def _sync(self) -> None:
        token = random.randrange(1, 2**31)
        sync = {"execute": "guest-sync-delimited", "arguments": {"id": token}}
        self._send(SENTINEL + json.dumps(sync).encode() + b"\n")
        deadline = time.monotonic() + self.timeout  # however much the guest sends meanwhile
        while True:
            # the reply to the sync is the first thing after a 0xFF; older lines are dropped
            while SENTINEL not in self.buffer:
                self.buffer.clear()
                self._receive("guest-sync-delimited", deadline)
            del self.buffer[: self.buffer.index(SENTINEL) + 1]
            line = self._read_line("guest-sync-delimited", deadline)
            try:
                if _reply(line, "guest-sync-delimited").get("return") == token:
                    return
            except BackendError:
                continue

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as error:
            raise BackendError(
                f"The guest agent connection failed ({error}).", retryable=True
            ) from error

    def _read_line(self, command: str, deadline: float | None = None) -> bytes:
        """The next line, within the session's timeout (or until deadline)."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        scanned = 0
        while (end := self.buffer.find(b"\n", scanned)) < 0:
            scanned = len(self.buffer)
            if scanned > MAX_REPLY:
                raise BackendError(f"The guest agent's reply to {command} is too large.")
            self._receive(command, deadline)
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line

    def _receive(self, command: str, deadline: float) -> None:
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
        except TimeoutError as error:
            raise BackendError(
                f"The guest agent did not answer {command} within {self.timeout:g} s "
                "(is qemu-ga running in the guest?).",
                retryable=True,
            ) from error
        except OSError as error:
            raise BackendError(
                f"The guest agent connection failed ({error}).", retryable=True
            ) from error
        if not chunk:
            raise BackendError("The guest agent closed the connection.", retryable=True)
        self.buffer += chunk


def _reply(line: bytes, command: str) -> dict[str, Any]:
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise BackendError(f"The guest agent sent an unreadable reply to {command}.")
    return reply


def _count(value: object, command: str) -> int:
    if not isinstance(value, int):
        raise BackendError(f"The guest agent sent an unreadable reply to {command}.")
    return value


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """Replies the guest sends are the guest's to shape: one not shaped as the protocol says
    is a BackendError, not a crash of the caller."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise BackendError(f"The guest agent sent an unreadable reply for {what}.") from error


def _interfaces(reply: list[dict[str, Any]]) -> tuple[GuestInterface, ...]:
    return tuple(
        GuestInterface(
            name=entry["name"],
            mac=entry.get("hardware-address", ""),
            addresses=tuple(
                f"{address['ip-address']}/{address['prefix']}"
                for address in entry.get("ip-addresses", [])
            ),
        )
        for entry in reply
        if entry["name"] != "lo"
    )


def _filesystems(reply: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "mountpoint": entry.get("mountpoint", ""),
            "type": entry.get("type", ""),
            "device": entry.get("name", ""),
            "total_bytes": entry.get("total-bytes"),
            "used_bytes": entry.get("used-bytes"),
        }
        for entry in reply
    )


def _meminfo(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key] = int(fields[0])
    return values
