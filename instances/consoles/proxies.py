"""Which console proxy process serves a session, and whether that process still runs.

A proxy is named by its host, its pid and the kernel's start time of that pid (a pid alone is
reused), so that a proxy starting on a host closes only the sessions of proxies that are gone,
not those of another proxy running beside it.
"""

import functools
import os
import socket
from pathlib import Path


def _started(pid: int) -> str | None:
    """The start time of the process, in clock ticks since boot; None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name before it may hold any bytes
    return None if fields[0] in ("Z", "X") else fields[19]


@functools.cache
def this_proxy() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{_started(pid)}"


def proxy_gone(proxy: str) -> bool:
    """True for a proxy of this machine whose process ended (or a session that names none);
    a proxy of another machine is not this one's to judge."""
    host, _, rest = proxy.partition("/")
    pid, _, started = rest.partition("/")
    if not proxy or not pid.isdecimal():
        return True
    return host == socket.gethostname() and _started(int(pid)) != started
