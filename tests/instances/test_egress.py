"""One egress policy for every outbound fetch: each spelling of this machine's loopback and of a
link-local address is refused by image imports, registry references, git sources and cloud
endpoint URLs alike, with one text, before a byte reaches the server behind it. Loopback only:
the servers listen on 127.0.0.1/::1, and the names that "resolve" are answered in-process."""

import asyncio
import html
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.core.exceptions import ValidationError
from django.urls import reverse
from websockets.sync.server import ServerConnection, serve

from instances import url_fetch
from instances.choices import GitAuth, SyncStatus
from instances.consoles.bridges.links import Unavailable
from instances.containerdisks.skopeo import plain_http
from instances.egress import EgressRefused
from instances.egress.http import pin_session, pinned_session
from instances.gitops.services import SourceRequest, git_source_save
from instances.gitops.sync import git_source_sync
from instances.models import ImageImport
from instances.services.container_disks import container_image_add
from provisioning.clouds.aws.sdk import forget_clients
from provisioning.clouds.aws.ssm_channel import SsmChannel, Stream
from provisioning.clouds.aws.ssm_console import SsmConsole
from provisioning.endpoints import endpoint_refusal
from provisioning.services.accounts import account_check, account_create

pytestmark = pytest.mark.django_db

REFUSED = "an address the console does not fetch from"
DEFAULT = ["127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128", "169.254.0.0/16", "fe80::/10"]
# Every way of naming this machine's loopback, the unspecified address, or link-local.
SPELLINGS = [
    "127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]",
    "[::127.0.0.1]", "0.0.0.0", "[::]", "[::1]", "localhost",
    "169.254.169.254", "[::ffff:169.254.169.254]", "[fe80::1]",
]  # fmt: skip


class Listener:
    """A loopback-only HTTP service on one port of 127.0.0.1 and ::1 (or of `host`), counting
    every connection it accepts."""

    def __init__(self, host: str = "127.0.0.1", redirect_to: str = "") -> None:
        self.connections = 0
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                listener.connections += 1
                super().setup()

            def do_GET(self) -> None:
                if redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", "22")
                self.end_headers()
                self.wfile.write(b"loopback-only answer\r\n")

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        class V6(ThreadingHTTPServer):
            address_family = socket.AF_INET6

        self.servers = [ThreadingHTTPServer((host, 0), Handler)]
        self.port = self.servers[0].server_address[1]
        if host == "127.0.0.1":
            self.servers.append(V6(("::1", self.port), Handler))
        for server in self.servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def policy(settings):
    """The product's default policy (the test run allows loopback), under both its names."""
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = DEFAULT
    settings.ZOPDAY_IMPORT_BLOCKED_NETWORKS = DEFAULT
    return settings


@pytest.fixture
def listener(policy) -> Iterator[Listener]:
    served = Listener()
    yield served
    served.stop()


@pytest.fixture
def resolving(monkeypatch):
    """resolving(name, [answers...]): each lookup of `name` gets the next answer (the last one
    again when they run out): a DNS server that answers a second time otherwise."""
    real = socket.getaddrinfo

    def install(name: str, answers: list[str]) -> None:
        left = list(answers)

        def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
            if host == name:
                address = left.pop(0) if len(left) > 1 else left[0]
                return real(address, port, *args, **kwargs)
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    return install


MALFORMED = ["http://[::1", "http://host:99999/", "http://%zz/", "http://a\\@b.example/x"]


def at(spelling: str, port: int) -> str:
    return f"{spelling}:{port}"


def fetch_refusal(url: str) -> str:
    """What an image import says of `url` (it must refuse it)."""
    with pytest.raises(url_fetch.FetchError) as refused:  # noqa: SIM117 (the refusal is the point)
        with url_fetch.url_opened(url, url_fetch.limits()):
            pass
    return refused.value.message


# ---- image imports ----------------------------------------------------------


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_an_image_import_refuses_every_spelling_of_a_blocked_address(listener, spelling):
    assert REFUSED in fetch_refusal(f"http://{at(spelling, listener.port)}/x.qcow2")
    assert listener.connections == 0


def test_a_loopback_only_answer_is_not_read_through_a_mapped_ipv6_address(
    listener, client_for, project
):
    data = {"name": "mapped", "format": "raw", "os_type": "linux", "sha256": "",
            "url": f"http://[::ffff:127.0.0.1]:{listener.port}/x.img"}  # fmt: skip
    page = client_for("operator").post(
        reverse("image-url-import", args=[project.slug]),
        {f"import-{key}": value for key, value in data.items()},
        follow=True,
    )
    error = html.unescape(page.text.split('id="import-url-error">', 1)[1].split("</p>", 1)[0])
    assert f"::ffff:127.0.0.1 is 127.0.0.1, {REFUSED}" in error
    assert listener.connections == 0 and not ImageImport.objects.exists()


def test_a_redirect_to_a_blocked_address_is_refused_at_the_hop(policy, settings):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.1/32"]  # the first hop is allowed
    target = Listener()
    hop = Listener("127.0.0.2", redirect_to=f"http://[::ffff:127.0.0.1]:{target.port}/secret")
    try:
        said = fetch_refusal(f"http://127.0.0.2:{hop.port}/x.img")
        assert f"::ffff:127.0.0.1 is 127.0.0.1, {REFUSED}" in said
        assert hop.connections == 1 and target.connections == 0
    finally:
        target.stop()
        hop.stop()


def test_a_second_dns_answer_is_refused_at_connect_time_before_a_byte_is_sent(
    listener, settings, resolving
):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.1/32"]
    resolving("rebind.example", ["127.0.0.2", "127.0.0.1"])  # checked, then another answer
    said = fetch_refusal(f"http://rebind.example:{listener.port}/x")
    assert f"rebind.example is 127.0.0.1, {REFUSED}" in said
    assert listener.connections == 0


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_import_url_is_answered_at_its_field(client_for, project, url):
    data = {"name": "bad", "format": "raw", "os_type": "linux", "sha256": "", "url": url}
    page = client_for("operator").post(
        reverse("image-url-import", args=[project.slug]),
        {f"import-{key}": value for key, value in data.items()},
        follow=True,
    )
    assert page.status_code == 200 and 'id="import-url-error">' in page.text
    assert not ImageImport.objects.exists()


def test_a_malformed_import_url_in_the_api_is_a_422_at_url(api_for, project):
    for url in MALFORMED:
        body = {"name": "bad", "format": "raw", "url": url}
        answer = api_for("operator").post(f"/projects/{project.slug}/image-imports", body)
        assert answer.status_code == 422, url
        assert "url" in str(answer.json())


# ---- registry references ----------------------------------------------------


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_registry_reference_refuses_every_spelling_of_a_blocked_address(
    listener, project, owner, spelling
):
    with pytest.raises(ValidationError) as refused:
        container_image_add(project=project, actor=owner, name="disk",
                            reference=f"{at(spelling, listener.port)}/x/disk:1")  # fmt: skip
    said = refused.value.message_dict["reference"][0]
    assert REFUSED in said or "Start the reference with the registry's host name" in said
    assert listener.connections == 0


def test_a_registry_name_answered_anew_for_skopeo_is_refused_by_the_egress_proxy(
    listener, settings, resolving, project, owner
):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.1/32"]
    resolving("registry.rebind.example", ["127.0.0.2", "127.0.0.1"])
    with pytest.raises(ValidationError) as refused:
        container_image_add(project=project, actor=owner, name="disk",
                            reference=f"registry.rebind.example:{listener.port}/x/disk:1")  # fmt: skip
    said = refused.value.message_dict["reference"][0]
    assert f"registry.rebind.example is 127.0.0.1, {REFUSED}" in said
    assert listener.connections == 0


@pytest.mark.parametrize(
    ("registry", "plain"),
    [("127.0.0.1:5000", True), ("localhost:5000", True), ("[::1]:5000", True),
     ("localhost.example.com:5000", False), ("127.0.0.1.nip.io:5000", False),
     ("127.example.com", False)],
)  # fmt: skip
def test_only_a_registry_really_on_loopback_is_spoken_to_in_plain_http(registry, plain):
    assert plain_http(registry) is plain


def test_a_registry_port_out_of_range_is_answered_at_the_reference(project, owner):
    with pytest.raises(ValidationError) as refused:
        container_image_add(project=project, actor=owner, name="disk",
                            reference="registry.example.com:99999/x/disk:1")  # fmt: skip
    assert "port is a number up to 65535" in refused.value.message_dict["reference"][0]


def test_a_registry_reply_that_is_not_json_is_a_message_at_the_reference(
    project, owner, tmp_path, monkeypatch
):
    from instances.containerdisks import cache

    monkeypatch.setattr(cache, "inspect_raw", lambda reference, access: b"<html>hi</html>")
    with pytest.raises(ValidationError) as refused:
        container_image_add(project=project, actor=owner, name="disk",
                            reference="registry.example.com/x/disk:1")  # fmt: skip
    assert "its reply is not a JSON object" in refused.value.message_dict["reference"][0]


# ---- git sources ------------------------------------------------------------


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("scheme", ["http", "ssh", "git"])
def test_a_git_source_refuses_every_spelling_of_a_blocked_address(
    listener, project, owner, spelling, scheme
):
    url = f"{scheme}://git@{at(spelling, listener.port)}/team/repo.git"
    request = SourceRequest(url=url, branch="main", path="", auth=GitAuth.NONE)
    try:
        source = git_source_save(project=project, actor=owner, request=request)
    except ValidationError as refused:
        said = refused.message_dict["url"][0]
    else:
        done = git_source_sync(source_id=source.pk, trigger="manual")
        assert done is not None and done.status == SyncStatus.FAILED
        said = done.message
    assert REFUSED in said
    assert listener.connections == 0


@pytest.mark.parametrize("url", ["http://[::1/x.git", "https://host:99999/x.git", "http://%zz/x"])
def test_a_malformed_git_url_is_answered_at_its_field(client_for, project, url):
    form = {"url": url, "branch": "main", "path": "", "auth": GitAuth.NONE, "credential": ""}
    page = client_for("owner").post(f"/projects/{project.slug}/git/", form)
    assert page.status_code == 200 and 'id="url-error"' in page.text


def test_git_connects_to_the_address_the_console_checked(
    listener, settings, resolving, project, owner
):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["169.254.0.0/16"]
    resolving("git.pinned.example", ["127.0.0.1"])  # only this process knows the name
    url = f"http://git.pinned.example:{listener.port}/team/repo.git"
    request = SourceRequest(url=url, branch="main", path="", auth=GitAuth.NONE)
    source = git_source_save(project=project, actor=owner, request=request)
    git_source_sync(source_id=source.pk, trigger="manual")
    assert listener.connections >= 1  # git used the console's answer, not its own lookup


def test_git_follows_no_redirect_to_a_blocked_address(policy, settings, project, owner):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.1/32"]  # the first hop is allowed
    target = Listener()
    hop = Listener("127.0.0.2", redirect_to=f"http://127.0.0.1:{target.port}/team/repo.git")
    try:
        url = f"http://127.0.0.2:{hop.port}/team/repo.git"
        request = SourceRequest(url=url, branch="main", path="", auth=GitAuth.NONE)
        source = git_source_save(project=project, actor=owner, request=request)
        done = git_source_sync(source_id=source.pk, trigger="manual")
        assert done is not None and done.status == SyncStatus.FAILED
        assert hop.connections >= 1 and target.connections == 0
    finally:
        target.stop()
        hop.stop()


def test_ssh_is_pinned_to_the_address_the_console_checked(
    policy, resolving, tmp_path, monkeypatch, project, owner
):
    called = tmp_path / "ssh-called"
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {called}\necho "denied" >&2\nexit 255\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    resolving("git.pinned.example", ["192.0.2.7"])  # only this process knows the name
    url = "ssh://git@git.pinned.example:2222/team/repo.git"
    request = SourceRequest(url=url, branch="main", path="", auth=GitAuth.NONE)
    source = git_source_save(project=project, actor=owner, request=request)
    git_source_sync(source_id=source.pk, trigger="manual")
    said = called.read_text()
    assert "HostName=192.0.2.7" in said and "HostKeyAlias=[git.pinned.example]:2222" in said


# ---- cloud endpoint URLs ----------------------------------------------------


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_cloud_endpoint_refuses_every_spelling_of_a_blocked_address(
    listener, project, operator, spelling
):
    url = f"http://{at(spelling, listener.port)}/"
    forget_clients()
    try:
        account = account_create(project=project, actor=None, name="Sandbox",
                                 access_key_id="A", secret_access_key="S", endpoint_url=url)  # fmt: skip
    except ValidationError as refused:
        said = refused.message_dict["endpoint_url"][0]
    else:
        said = account_check(account=account, actor=operator).last_check_message
    assert REFUSED in said or said == "Enter a valid URL."
    assert listener.connections == 0


def test_the_sandbox_account_still_reaches_the_consoles_own_fake_cloud_on_loopback(
    listener, project, operator
):
    forget_clients()
    account = account_create(project=project, actor=None, name="Sandbox AWS", sandbox=True,
                             access_key_id="sandbox", secret_access_key="sandbox",
                             endpoint_url=f"http://127.0.0.1:{listener.port}")  # fmt: skip
    said = account_check(account=account, actor=operator).last_check_message
    assert REFUSED not in said and listener.connections >= 1


@pytest.mark.parametrize("url", ["http://host.example:99999/", "http://a\\@b.example/"])
def test_a_malformed_endpoint_url_is_answered_at_its_field(client, project, url):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    form = {"name": "Prod", "provider": "aws", "default_region": "us-east-1",
            "access_key_id": "A", "secret_access_key": "S", "endpoint_url": url}  # fmt: skip
    page = client.post(f"/projects/{project.slug}/provisioning/accounts/", form)
    assert page.status_code == 200 and 'id="endpoint_url-error"' in page.text


def test_the_endpoint_allow_list_is_matched_on_the_host_every_client_reads(settings, owner):
    settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST = ["allowed.example:443"]
    assert endpoint_refusal("https://allowed.example:443/", owner) == ""
    for url in ("http://127.0.0.1:8202\\@allowed.example:443/",
                "https://user@allowed.example:443/", "http://[::1"):  # fmt: skip
        assert endpoint_refusal(url, owner) != ""


# ---- proxies named by the environment ---------------------------------------


@pytest.fixture
def proxied(settings, monkeypatch, resolving) -> Iterator[Listener]:
    """A proxy that the worker's environment names, on an address the policy allows (it
    answers every request itself), and blocked.example, a name of a blocked address."""
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.2/32"]
    settings.ZOPDAY_IMPORT_BLOCKED_NETWORKS = ["127.0.0.2/32"]
    resolving("blocked.example", ["127.0.0.2"])
    proxy = Listener()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv(name.lower(), f"http://127.0.0.1:{proxy.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    yield proxy
    proxy.stop()


PINNED_SESSIONS = {
    "a cloud SDK's own session": lambda: pin_session(requests.Session()),
    "a new pinned session": pinned_session,
}


@pytest.mark.parametrize("make", PINNED_SESSIONS.values(), ids=PINNED_SESSIONS)
def test_a_proxy_in_the_environment_takes_no_pinned_session_past_the_policy(proxied, make):
    blocked, allowed = Listener("127.0.0.2"), Listener()
    try:
        session = make()
        with pytest.raises(EgressRefused):
            session.get(f"http://blocked.example:{blocked.port}/", timeout=10)
        assert session.get(f"http://127.0.0.1:{allowed.port}/", timeout=10).status_code == 200
        assert (proxied.connections, blocked.connections, allowed.connections) == (0, 0, 1)
    finally:
        blocked.stop()
        allowed.stop()


def test_a_proxy_in_the_environment_takes_no_cloud_client_past_the_policy(
    proxied, project, operator
):
    blocked = Listener("127.0.0.2")
    forget_clients()
    try:
        account = account_create(project=project, actor=None, name="Cloud",
                                 access_key_id="A", secret_access_key="S",
                                 endpoint_url=f"http://blocked.example:{blocked.port}/")  # fmt: skip
        said = account_check(account=account, actor=operator).last_check_message
    finally:
        forget_clients()
        blocked.stop()
    assert REFUSED in said
    assert (proxied.connections, blocked.connections) == (0, 0)


# ---- Session Manager stream URLs --------------------------------------------


class EndpointSsm:
    """The ssm client of a non-sandbox account whose endpoint answers StartSession with a
    stream URL of its choosing."""

    def __init__(self, stream_url: str) -> None:
        self.stream_url, self.terminated = stream_url, []

    def start_session(self, Target: str) -> dict:
        return {"SessionId": "s-1", "StreamUrl": self.stream_url, "TokenValue": "token"}

    def terminate_session(self, SessionId: str) -> None:
        self.terminated.append(SessionId)


def exec_refusal(stream_url: str) -> tuple[str, EndpointSsm]:
    """What opening the exec console of an account's VM says, its endpoint naming `stream_url`."""
    ssm = EndpointSsm(stream_url)
    console = SsmConsole("i-0123456789abcdef0", "us-east-1", "", ssm=ssm, ec2=None)
    with pytest.raises(Unavailable) as refused:
        asyncio.run(console.open_link(on_data=lambda data: None, on_closed=lambda: None))
    return str(refused.value), ssm


@pytest.mark.parametrize("spelling", ["[::ffff:127.0.0.1]", "127.1", "0x7f000001", "[::1]"])
@pytest.mark.parametrize("scheme", ["wss", "ws"])
def test_a_session_manager_stream_url_refuses_every_spelling_of_a_blocked_address(
    listener, spelling, scheme
):
    url = f"{scheme}://{at(spelling, listener.port)}/v1/data-channel/s-1?role=publish_subscribe"
    said, ssm = exec_refusal(url)
    assert REFUSED in said and ssm.terminated == ["s-1"]
    assert listener.connections == 0


class StreamServer:
    """A data-channel websocket on 127.0.0.1 that records each connection's Host header and
    what it was sent."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.received: list[str | bytes] = []

        def handler(ws: ServerConnection) -> None:
            self.hosts.append(ws.request.headers["Host"] if ws.request else "")
            for message in ws:
                self.received.append(message)

        self.server = serve(handler, "127.0.0.1", 0, compression=None)
        self.port = self.server.socket.getsockname()[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


async def stream_opened(url: str) -> None:
    """Open a data channel on `url`, then end it."""

    async def nothing() -> None: ...

    async def no_resume() -> Stream:
        raise AssertionError("the channel did not drop")

    channel = SsmChannel(Stream(url, "token"), on_data=lambda data: None,
                         on_closed=lambda: None, resume=no_resume, terminate=nothing)  # fmt: skip
    await channel.open()
    channel.close()
    await channel.ended.wait()


def test_a_proxy_in_the_environment_takes_no_session_manager_stream_past_the_policy(proxied):
    blocked = Listener("127.0.0.2")
    try:
        said, _ = exec_refusal(f"ws://blocked.example:{blocked.port}/v1/data-channel/s-1")
    finally:
        blocked.stop()
    assert f"blocked.example is 127.0.0.2, {REFUSED}" in said
    assert (proxied.connections, blocked.connections) == (0, 0)


def test_a_session_manager_stream_connects_straight_to_the_address_checked(proxied, resolving):
    resolving("ssmmessages.rebind.example", ["127.0.0.1", "127.0.0.2"])  # checked, then another
    server = StreamServer()
    try:
        host = f"ssmmessages.rebind.example:{server.port}"
        asyncio.run(stream_opened(f"ws://{host}/v1/data-channel/s-1?role=publish_subscribe"))
    finally:
        server.stop()
    assert server.hosts == [host] and server.received  # the name kept, the token said
    assert proxied.connections == 0
