"""The console kinds, in one registry: what each is called, which allowed-actions rule opens it,
which backend socket it bridges to and how the proxy treats its bytes."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsoleKind:
    name: str  # in URLs and tickets
    label: str  # on buttons
    description: str
    socket_kind: str  # Backend.console_socket(machine_id, kind)
    protocol: str  # "terminal" (xterm.js, fan-out hub) or "rfb" (noVNC, one backend link each)
    rule: str = "console"  # the rule of instances.actions.CONSOLE_RULES that opens it
    interactive_rule: str = "console_interactive"  # ... and the one that lets the user type
    history_from_serial_log: bool = False  # late viewers first get the tail of the serial log
    recorded: bool = False  # asciicast v2 recording of every session

    @property
    def is_terminal(self) -> bool:
        return self.protocol == "terminal"


CONSOLE_KINDS: dict[str, ConsoleKind] = {
    kind.name: kind
    for kind in (
        ConsoleKind(
            name="serial",
            label="Serial",
            description="The guest's first serial port (ttyS0): boot messages and a login shell.",
            socket_kind="serial",
            protocol="terminal",
            history_from_serial_log=True,
            recorded=True,
        ),
        ConsoleKind(
            name="vnc",
            label="VNC",
            description="The guest's graphical screen, keyboard and mouse.",
            socket_kind="vnc",
            protocol="rfb",
            rule="vnc_console",
            interactive_rule="vnc_console_interactive",
        ),
        ConsoleKind(
            name="exec",
            label="Exec",
            description="A shell inside the guest over a virtio-serial channel: "
            "no network and no SSH needed.",
            socket_kind="exec",
            protocol="terminal",
            rule="exec_console",
            interactive_rule="exec_console_interactive",
            recorded=True,
        ),
    )
}


def console_kind(name: str) -> ConsoleKind | None:
    return CONSOLE_KINDS.get(name)
