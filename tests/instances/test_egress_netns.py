"""skopeo in a network namespace of its own: Go never proxies loopback, so a registry that
redirects to 127.0.0.1 must find nothing there but the relay to the policy-checking proxy.
Loopback only: the registry listens on 127.0.0.2, the victim on 127.0.0.1."""

import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import parse_reference
from instances.containerdisks.skopeo import Access, inspect_raw
from instances.egress import netns, netns_relay
from instances.egress.proxy import egress_proxy
from tests.instances.test_egress import DEFAULT, Listener

pytestmark = pytest.mark.skipif(not netns.available(), reason="network namespaces need root")

REGISTRY = "registry.redirect.example"


@pytest.fixture
def victim() -> Iterator[Listener]:
    """A loopback-only service that counts every connection it accepts."""
    served = Listener()
    yield served
    served.stop()


@pytest.fixture
def redirecting_registry(tmp_path, victim, settings, monkeypatch) -> Iterator[int]:
    """A registry over TLS on 127.0.0.2, which the policy allows (the default policy with only
    127.0.0.1 of loopback blocked), whose manifests redirect to the victim; its port."""
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.1/32", *DEFAULT[1:]]
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={REGISTRY}", "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v2/":
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                return
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{victim.port}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        return real("127.0.0.2" if host == REGISTRY else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)  # only the console knows the name
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_registry_redirect_to_loopback_reaches_nothing_on_this_host(redirecting_registry, victim):
    reference = parse_reference(f"{REGISTRY}:{redirecting_registry}/x/disk:1")
    with pytest.raises(ContainerDiskError):
        inspect_raw(reference, Access(insecure=True, timeout=120))
    assert victim.connections == 0


def test_the_relay_leaves_loopback_holding_only_the_policy_checking_proxy(
    tmp_path, victim, settings
):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = DEFAULT
    probe = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {victim.port}), timeout=10)\n"
        "    sys.exit('the victim answered')\n"
        "except ConnectionRefusedError:\n"
        "    pass\n"
        "proxy = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        f"proxy.sendall(b'CONNECT 127.0.0.1:{victim.port} HTTP/1.1\\r\\n\\r\\n')\n"
        "print(proxy.recv(100).decode().split()[1])\n"
    )
    with egress_proxy(tmp_path / "egress.sock") as proxy:
        relay = [sys.executable, "-I", netns_relay.__file__, str(proxy.socket), "3128"]
        ran = subprocess.run(
            ["unshare", "--net", "--", *relay, "--", sys.executable, "-c", probe],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert (ran.returncode, ran.stdout.strip()) == (0, "403"), ran.stderr
    assert victim.connections == 0 and "127.0.0.1" in proxy.refused[0]


def test_a_program_is_wrapped_in_a_namespace_with_the_registry_port_tunnelled(tmp_path):
    with egress_proxy(tmp_path / "egress.sock") as proxy:
        argv, url = netns.isolated(["skopeo", "inspect"], proxy, ["127.0.0.1:3128"])
    assert argv[:3] == ["unshare", "--net", "--"] and argv[-2:] == ["skopeo", "inspect"]
    assert "3128=127.0.0.1:3128" in argv and url == "http://127.0.0.1:3129"
    assert Path(argv[5]).name == "netns_relay.py"
