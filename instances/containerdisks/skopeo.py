"""skopeo, the registry client: read a manifest, copy an image by digest into a folder.
Credentials go through a private auth file, never the command line; skopeo's failures become
ContainerDiskError with what to fix. The registry's host is checked by the egress policy, and
skopeo reaches HTTPS only through the policy's proxy (instances.egress.proxy)."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from instances import egress
from instances.egress.netns import isolated
from instances.egress.proxy import egress_proxy

from .errors import ContainerDiskError
from .reference import Reference

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
PULL_TIMEOUT = 1800  # seconds


@dataclass(frozen=True)
class Access:
    """How to reach a registry: plain HTTP (`insecure`), and the project's login, if any."""

    insecure: bool = False
    username: str = ""
    password: str = ""
    timeout: float = PULL_TIMEOUT


def plain_http(registry: str) -> bool:
    """Registries on loopback speak plain HTTP, as Docker treats 127.0.0.0/8 by default; a
    name that only starts like one (localhost.example.com, 127.0.0.1.nip.io) gets TLS."""
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    return egress.loopback(host.strip("[]"))


def refuse_blocked(registry: str) -> None:
    """The registry's host is known and names no address the egress policy blocks."""
    try:
        parts = egress.split_url(f"https://{registry}/")
        if not egress.checked_addresses(parts.host, parts.port):
            raise ContainerDiskError(f"No registry host {parts.host} is known: check its name.")
    except egress.EgressRefused as refused:
        raise ContainerDiskError(refused.message) from None
    except ValueError as error:
        raise ContainerDiskError(str(error)) from None


def _loopback_targets(registry: str) -> list[str]:
    """Where skopeo meets a registry on this host's loopback (allowed by the policy, as
    refuse_blocked checked): HOST:PORT, or both default ports when none is named."""
    if not plain_http(registry):
        return []
    if registry.rpartition(":")[2].isdigit():
        return [registry]
    return [f"{registry}:443", f"{registry}:80"]


def inspect_raw(reference: Reference, access: Access) -> bytes:
    """The manifest (or index) the reference names, byte for byte as the registry sends it."""
    return _skopeo(["inspect", "--raw"], reference, access, [f"docker://{reference}"])


def copy_to_folder(reference: Reference, access: Access, folder: Path) -> None:
    """The image (a pinned reference) into `folder` in skopeo's dir: layout."""
    _skopeo(["copy", "-q"], reference, access, [f"docker://{reference}", f"dir:{folder}"])


def _skopeo(command: list[str], reference: Reference, access: Access, args: list[str]) -> bytes:
    if shutil.which("skopeo") is None:
        raise ContainerDiskError("skopeo is not installed on the host (apt-get install skopeo).")
    tls = "--src-tls-verify" if command[0] == "copy" else "--tls-verify"
    refuse_blocked(reference.registry)
    with (
        tempfile.TemporaryDirectory(prefix="zopday-skopeo-") as private,
        egress_proxy(Path(private) / "egress.sock") as proxy,
    ):
        authfile = Path(private) / "auth.json"
        auths = {}
        if access.username:
            token = base64.b64encode(f"{access.username}:{access.password}".encode()).decode()
            auths[reference.registry] = {"auth": token}
        authfile.write_text(json.dumps({"auths": auths}))
        auth = "--src-authfile" if command[0] == "copy" else "--authfile"
        argv = ["skopeo", *command, f"{tls}={str(not access.insecure).lower()}",
                f"{auth}={authfile}", "--retry-times=0", *args]  # fmt: skip
        # Go's clients tunnel every non-loopback HTTPS connection through the proxy; in a
        # network namespace of its own, loopback holds nothing but a relay to it
        argv, proxy_url = isolated(argv, proxy, _loopback_targets(reference.registry))
        env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
        env.update(dict.fromkeys(PROXY_VARIABLES, proxy_url))
        try:
            result = subprocess.run(
                argv, capture_output=True, timeout=access.timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired:
            raise ContainerDiskError(
                f"Pulling {reference} took over {access.timeout:.0f} s.", retryable=True
            ) from None
    if result.returncode != 0 and proxy.refused:
        raise ContainerDiskError(proxy.refused[0])
    if result.returncode != 0 and proxy.unreachable:
        if proxy.unreachable[0] == egress.split_url(f"https://{reference.registry}/").host:
            raise ContainerDiskError(
                f"Nothing answers as a registry at {reference.registry}: check its host name "
                "and port.",
                retryable=True,
            )
        raise ContainerDiskError(
            f"Nothing answers at {proxy.unreachable[0]}: check the registry's host name and port.",
            retryable=True,
        )
    if result.returncode != 0:
        raise failure(reference, access, result.stderr.decode(errors="replace"))
    return result.stdout


def failure(reference: Reference, access: Access, stderr: str) -> ContainerDiskError:
    """skopeo's complaint, said as what the user should fix."""
    said = stderr.lower()
    host = reference.registry
    if "unauthorized" in said or "authentication required" in said or "401" in said:
        if access.username:
            return ContainerDiskError(
                f"{host} refused the credentials of user {access.username}: correct the "
                "project's registry credentials for it.",
                field="credentials",
            )
        return ContainerDiskError(
            f"{host} asks for a login: add the project's registry credentials for {host}.",
            field="credentials",
        )
    if "manifest unknown" in said or "name unknown" in said or "not found" in said:
        return ContainerDiskError(
            f"{host} has no image {reference.repository}"
            f"{'@' + reference.digest if reference.digest else ':' + reference.tag}: "
            "check the repository and tag."
        )
    if "digest did not match" in said or "digest mismatch" in said:
        return ContainerDiskError(
            f"A blob of {reference} did not match its digest: the registry sent a damaged or "
            "altered image; push it again."
        )
    if "no such host" in said or "server misbehaving" in said or "lookup " in said:
        return ContainerDiskError(f"No registry host {host} is known: check its name.")
    if "connection refused" in said or "dial tcp" in said or "i/o timeout" in said:
        return ContainerDiskError(
            f"Nothing answers as a registry at {host}: check its host name and port.",
            retryable=True,
        )
    if "http response to https client" in said or "tls" in said or "x509" in said:
        return ContainerDiskError(
            f"Could not talk TLS with {host}: a registry needs HTTPS with a certificate the "
            "host trusts (plain HTTP only on loopback)."
        )
    last = [line for line in stderr.splitlines() if line.strip()][-1:] or ["no reason given"]
    return ContainerDiskError(f"Could not pull {reference}: {last[0].strip()[:200]}")
