"""Which addresses the console never connects to on a user's word (ZOPDAY_EGRESS_BLOCKED_NETWORKS:
this machine's loopback, link-local metadata services...). An address is matched once unwrapped
(IPv4-mapped, NAT64, 6to4, IPv4-compatible IPv6) and every spelling of a host is resolved first."""

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# Characters no host name or URL authority of ours holds: clients split such URLs differently.
UNSAFE = re.compile(r"[\\\s\x00-\x1f\x7f]")
NUMERIC_HOST = re.compile(r"^[0-9a-fA-FxX.]+$")


class EgressRefused(Exception):
    """The console will not connect there; `message` says so, the same text everywhere."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def refusal(host: str, address: str) -> str:
    """The one refusal text of every consumer."""
    return (
        f"{host} is {address}, an address the console does not fetch from (this machine's "
        "own, or a link-local one): give an address on another server."
    )


def _unwrapped(ip: IPAddress) -> list[IPAddress]:
    """The address and every IPv4 address it carries (the kernel or a gateway reaches that)."""
    found: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            found.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            found.append(ip.sixtofour)
        if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):
            found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.teredo is not None:
            found.extend(ip.teredo)
    return found


def literal(host: str) -> IPAddress | None:
    """The address a host spelled as one names (127.0.0.1, 127.1, 0x7f000001, 2130706433,
    0177.0.0.1, [::ffff:127.0.0.1], fe80::1%eth0), or None for a name."""
    host = host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if NUMERIC_HOST.match(host):
        try:  # the C library's reading, which resolvers and many clients share
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def loopback(host: str) -> bool:
    """The host is this machine itself: `localhost`, or a loopback address in any spelling
    (not a name that merely starts like one, such as localhost.example.com or 127.0.0.1.nip.io)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    ip = literal(host)
    return ip is not None and any(candidate.is_loopback for candidate in _unwrapped(ip))


def blocked_as(address: str) -> str:
    """The blocked address this one is or wraps (in its plain spelling), or ""."""
    ip = literal(address)
    if ip is None:
        return ""
    networks = [ipaddress.ip_network(net) for net in settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS]
    for candidate in _unwrapped(ip):
        if any(candidate.version == net.version and candidate in net for net in networks):
            return str(candidate)
    return ""


def blocked(address: str) -> bool:
    """The address (any spelling) is in a blocked network, itself or what it wraps."""
    return bool(blocked_as(address))


def literal_refusal(host: str) -> str:
    """The refusal of a host spelled as a blocked address ("" otherwise), without DNS: what a
    form can say at once; the fetch resolves names and checks them again."""
    seen = blocked_as(host)
    return refusal(host, seen) if seen else ""


def checked_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, once none is blocked (EgressRefused names the first
    that is); [] when it does not resolve (the client then says the host is unknown)."""
    ip = literal(host)
    if ip is not None:
        found = [str(ip)]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return []
        found = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
    for address in found:
        if seen := blocked_as(address):
            raise EgressRefused(refusal(host, seen))
    return found


def refuse_peer(sock: socket.socket, host: str) -> None:
    """At connect time: the peer really connected to is not blocked either (a second DNS
    answer, a redirect's host). Closes the socket and raises EgressRefused when it is."""
    try:
        peer = str(sock.getpeername()[0])
    except OSError:
        return  # not connected: the client reports that itself
    if seen := blocked_as(peer):
        sock.close()
        raise EgressRefused(refusal(host, seen))


@dataclass(frozen=True)
class UrlParts:
    scheme: str
    host: str  # without brackets, lowercased
    port: int


DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git": 9418}


def split_url(url: str) -> UrlParts:
    """The scheme, host and port of `url`, read one way only; ValueError with a message for
    the user when the URL is malformed or could be read two ways."""
    if UNSAFE.search(url):
        raise ValueError(
            "The address holds a space, a backslash or a control character: remove it."
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(
            "This is not a valid address (check the brackets around an IPv6 address and that "
            "the port is a number up to 65535)."
        ) from None
    host = (parts.hostname or "").lower()
    if "%" in host or "@" in host:
        raise ValueError(f"{host!r} is not a host name: check the address.")
    scheme = parts.scheme.lower()
    return UrlParts(scheme, host, port or DEFAULT_PORTS.get(scheme, 0))
