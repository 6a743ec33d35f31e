"""A program run in a network namespace of its own, whose loopback holds only a relay to the
egress proxy (instances.egress.netns_relay): Go's clients never proxy loopback addresses, so a
redirect to 127.0.0.1:port would otherwise reach this host's services. Needs root."""

import functools
import logging
import os
import shutil
import sys
from pathlib import Path

from . import netns_relay
from .proxy import Proxy

logger = logging.getLogger(__name__)

PROXY_PORT = 3128  # inside the namespace; below the ephemeral range the host's services use


@functools.cache
def available() -> bool:
    """Whether programs can be isolated (root, util-linux unshare, iproute2); said once if not."""
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        return True
    logger.warning(
        "No network namespace for registry pulls (it needs root, unshare and ip): skopeo reaches "
        "loopback addresses a registry redirects to without the egress proxy."
    )
    return False


def isolated(argv: list[str], proxy: Proxy, loopback: list[str]) -> tuple[list[str], str]:
    """`argv` wrapped to run in its own network namespace, and the proxy URL it should use
    there; as it is, with the proxy's own URL, when no namespace is available. `loopback`
    lists HOST:PORT addresses on this host's loopback the program may reach through the proxy
    (a registry there that the policy allows), at the same port."""
    if proxy.socket is None or not available():
        return argv, proxy.url
    ports = {int(target.rpartition(":")[2]) for target in loopback}
    port = next(p for p in range(PROXY_PORT, 65536) if p not in ports)
    tunnels = [f"{target.rpartition(':')[2]}={target}" for target in loopback]
    relay = [sys.executable, "-I", str(Path(netns_relay.__file__)), str(proxy.socket), str(port)]
    return ["unshare", "--net", "--", *relay, *tunnels, "--", *argv], f"http://127.0.0.1:{port}"
