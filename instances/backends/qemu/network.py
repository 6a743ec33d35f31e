"""Bridged networking: every subnet is a real L2 segment, kept away from the host's own network.

As root, QEMU runs in our own network namespace, with a Linux bridge per segment (holding its
gateway) and a tap per NIC, so guests reach each other and the namespace and the host is
untouched. Device names are deterministic hashes (15 characters at most), so plugging is
idempotent; a lock file keeps a bridge from vanishing between another's check and tap creation.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from instances.backends.base import BackendError

FORWARDING_OFF = (
    "echo 0 > /proc/sys/net/ipv4/ip_forward; "
    "[ ! -e /proc/sys/net/ipv6/conf/all/forwarding ] || "
    "echo 0 > /proc/sys/net/ipv6/conf/all/forwarding"
)


def tap_name(machine_id: str, nic_name: str, place: str = "") -> str:
    """The NIC's tap; `place` (the backend's folder) keeps apart the taps of two backends that
    share a namespace, as a migration's source and target do."""
    return "zt" + _digest(f"{place}/{machine_id}/{nic_name}".removeprefix("/"))


def bridge_name(network: str) -> str:
    return "zb" + _digest(network)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:11]


class BridgedNetworks:
    """The namespace, its bridges and taps."""

    def __init__(self, namespace: str, lock_file: Path, *, place: str = "", ip: str = "ip") -> None:
        self.namespace, self.place = namespace, place
        self.lock_file = lock_file
        self.ip = ip
        self._forwarding_off = False

    @staticmethod
    def available() -> bool:
        """Bridged mode needs root (namespaces, taps) and iproute2."""
        return os.geteuid() == 0 and shutil.which("ip") is not None

    def exec_prefix(self) -> list[str]:
        """Prefix for a command that must run inside the namespace."""
        return [self.ip, "netns", "exec", self.namespace]

    def plug(self, machine_id: str, nic_name: str, network: str, gateway: str = "") -> str:
        """Make sure the segment's bridge and the NIC's tap exist and are up; the tap's name.
        The bridge holds the segment's gateway address (`10.77.0.1/24`), if it has one: the
        namespace then reaches the guests (`ip netns exec NS ssh spx@10.77.0.5`) and they it."""
        tap, bridge = tap_name(machine_id, nic_name, self.place), bridge_name(network)
        with self._lock():
            self._ensure_namespace()
            if not self._exists(bridge):
                self._ip("link", "add", bridge, "type", "bridge")
            if gateway:
                self._ip("addr", "replace", gateway, "dev", bridge)
            self._ip("link", "set", bridge, "up")
            if not self._exists(tap):
                self._ip("tuntap", "add", "dev", tap, "mode", "tap")
            self._ip("link", "set", tap, "master", bridge, "up")
        return tap

    def unplug(self, tap: str, network: str) -> None:
        """Remove the tap, and the segment's bridge when no tap is left on it."""
        bridge = bridge_name(network)
        with self._lock():
            if not self._namespace_exists():
                return
            if self._exists(tap):
                self._ip("link", "del", tap)
            if (
                self._exists(bridge)
                and not self._ip("-o", "link", "show", "master", bridge).strip()
            ):
                self._ip("link", "del", bridge)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with open(self.lock_file, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _namespace_exists(self) -> bool:
        return Path("/run/netns", self.namespace).exists()

    def _ensure_namespace(self) -> None:
        if not self._namespace_exists():
            self._run([self.ip, "netns", "add", self.namespace])
        if not self._forwarding_off:
            # A new namespace may copy the host's forwarding setting: with the gateways on its
            # bridges it would then route between subnets, other projects' among them.
            self._run([*self.exec_prefix(), "sh", "-c", FORWARDING_OFF])
            self._forwarding_off = True

    def _exists(self, device: str) -> bool:
        result = subprocess.run(
            [self.ip, "-n", self.namespace, "link", "show", "dev", device],
            capture_output=True,
            check=False,
        )
        return result.returncode == 0

    def _ip(self, *args: str) -> str:
        return self._run([self.ip, "-n", self.namespace, *args])

    def _run(self, argv: list[str]) -> str:
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"Network setup failed ({' '.join(argv[1:])}): no answer within 30 s.",
                retryable=True,
            ) from None
        if result.returncode != 0:
            reason = result.stderr.strip() or f"exit status {result.returncode}"
            raise BackendError(f"Network setup failed ({' '.join(argv[1:])}): {reason}")
        return result.stdout
