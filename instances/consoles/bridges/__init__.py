"""Bridges between admitted websockets and the backends' console sockets.

Terminals (serial, exec) share one backend connection per machine and console kind among all
their viewers (terminals.py); each VNC session has its own (vnc.py). links.py holds the socket
ends and flow control both use.
"""

from .hubs import HubRegistry, run_terminal
from .links import CLOSE_BACKEND_GONE, CLOSE_SESSION_ENDED, ConsoleConnection, Unavailable
from .terminals import TerminalHub, Viewer
from .vnc import run_vnc

__all__ = [
    "CLOSE_BACKEND_GONE",
    "CLOSE_SESSION_ENDED",
    "ConsoleConnection",
    "HubRegistry",
    "TerminalHub",
    "Unavailable",
    "Viewer",
    "run_terminal",
    "run_vnc",
]
