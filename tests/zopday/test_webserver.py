"""The web server of `bin/zop run` against slow clients: started with the very command bin/zop
gives supervisord, it answers while many sockets drip their headers, and cuts slow ones off."""

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from waitress.adjustments import Adjustments

from tests.services import ROOT
from tests.zopday.run_command import (
    NOT_INHERITED,
    free_port,
    http_status,
    program_commands,
    supervisor_config,
)
from zopday.webserver import LARGE_BODIES, SMALL_BODY_BYTES, BodyLimitParser

pytestmark = pytest.mark.integration

SLOW_CLIENTS = 12  # more than gunicorn's 2 sync workers and than the server's 8 threads
DRIP_SECONDS = 0.3
BOUND = 90  # generous: on a server that queues requests behind slow clients, minutes pass


# Users of project alpha as the server's own database holds them: their session cookies and an
# API token, printed by `manage.py shell` in the run folder.
SEED = """
import json
from django.test import Client
from instances.choices import Role
from django.contrib.auth.models import User
from instances.models import Membership, Project
from instances.services.tokens import api_token_create

alpha = Project.objects.create(slug="alpha", name="Alpha")
seeded = {}
for role in (Role.OPERATOR, Role.VIEWER):
    user = User.objects.create_user(str(role), password="correct-horse-battery")
    Membership.objects.create(project=alpha, user=user, role=role)
    client = Client()
    client.force_login(user)
    seeded[str(role)] = client.cookies["sessionid"].value
    seeded[str(role) + "_token"] = api_token_create(user=user, name="upload")[1]
print(json.dumps(seeded))
"""


def run_env(run_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return env | {"ZOPDAY_RUN_DIR": str(run_dir), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run folder whose database has its tables, as bin/zop run leaves it."""
    run_dir: Path = tmp_path_factory.mktemp("run")
    manage = [str(ROOT / ".venv" / "bin" / "python"), "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=run_env(run_dir), check=True)
    return run_dir


@pytest.fixture(scope="module")
def seeded(run_dir) -> dict[str, str]:
    """Session keys and API tokens of an operator and a viewer of project alpha."""
    manage = [str(ROOT / ".venv" / "bin" / "python"), "manage.py", "shell", "-c", SEED]
    done = subprocess.run(
        manage, cwd=ROOT, env=run_env(run_dir), check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def web(run_dir) -> Iterator[int]:
    """The `web` program of bin/zop's supervisord configuration, on a migrated run folder."""
    port = free_port()
    command = program_commands(supervisor_config(ROOT, run_dir, "127.0.0.1", port))["web"]
    env = run_env(run_dir)
    log = (run_dir / "web.log").open("w")
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + BOUND
    while http_status(url + "login/") != 200:
        assert server.poll() is None, (run_dir / "web.log").read_text()
        assert time.monotonic() < deadline, (run_dir / "web.log").read_text()
        time.sleep(0.2)
    yield port
    server.terminate()
    server.wait(timeout=30)
    log.close()


class Drip:
    """Sockets that each send a first part, then one more piece every DRIP_SECONDS; `cut`
    is set once the server has closed every one of them."""

    def __init__(self, port: int, first: bytes, piece: bytes, count: int) -> None:
        self.sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
        for sock in self.sockets:
            sock.sendall(first)
            sock.settimeout(0)
        self.piece, self.cut, self.stop = piece, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        open_ones = list(self.sockets)
        while open_ones and not self.stop.wait(DRIP_SECONDS):
            for sock in list(open_ones):
                if self._closed_by_server(sock):
                    open_ones.remove(sock)
                elif self.piece:
                    try:
                        sock.sendall(self.piece)
                    except OSError:
                        open_ones.remove(sock)
        if not open_ones:
            self.cut.set()

    @staticmethod
    def _closed_by_server(sock: socket.socket) -> bool:
        try:
            return sock.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


def answer(url: str) -> tuple[threading.Event, list[int]]:
    """GET url on a thread: the event is set once it has answered, with its status."""
    done, status = threading.Event(), []

    def get() -> None:
        with urllib.request.urlopen(url, timeout=BOUND) as response:
            response.read()
            status.append(response.status)
        done.set()

    threading.Thread(target=get, daemon=True).start()
    return done, status


def test_a_page_answers_while_slow_clients_drip_their_headers_and_they_are_cut_off(web):
    port = web
    head = b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    slow = Drip(port, head, b"X-Drip: 1\r\n", SLOW_CLIENTS)
    try:
        done, status = answer(f"http://127.0.0.1:{port}/login/")
        assert done.wait(BOUND), "the page waited behind the slow clients"
        assert status == [200]
        assert slow.cut.wait(BOUND), "slow headers were never cut off"
    finally:
        slow.close()


def test_a_client_that_stops_or_dribbles_halfway_through_its_body_is_cut_off(web):
    port = web
    head = (
        b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    )
    stopped = Drip(port, head + b"u" * 5000, b"", 4)
    dribbling = Drip(port, head + b"u" * 5000, b"u", 4)
    try:
        done, status = answer(f"http://127.0.0.1:{port}/login/")
        assert done.wait(BOUND)
        assert status == [200]
        assert stopped.cut.wait(BOUND), "a body that stopped halfway was never cut off"
        assert dribbling.cut.wait(BOUND), "a body dribbled a byte at a time was never cut off"
    finally:
        stopped.close()
        dribbling.close()


def large_post_head(path: str, headers: bytes = b"") -> bytes:
    """A POST's headers announcing a body just past a form's limit."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        + f"Content-Length: {SMALL_BODY_BYTES + 1}\r\n".encode()
        + b"Content-Type: application/octet-stream\r\nConnection: close\r\n"
        + headers
        + b"\r\n"
    )


def status_of_a_large_post(port: int, path: str, headers: bytes = b"") -> int:
    """POST a body just past a form's limit to path; the status the server answers with."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock:
        sock.sendall(large_post_head(path, headers))
        with contextlib.suppress(OSError):  # a refusal closes before the body is all sent
            sock.sendall(b"\0" * (SMALL_BODY_BYTES + 1))
        return int(sock.makefile("rb").readline().split()[1])


def cookie(session_key: str) -> bytes:
    return f"Cookie: sessionid={session_key}\r\n".encode()


def bearer(token: str) -> bytes:
    return f"Authorization: Bearer {token}\r\n".encode()


def test_only_an_image_upload_with_credentials_may_send_a_large_body(web, seeded):
    port = web
    page, api = "/projects/alpha/images/", "/api/v1/projects/alpha/images"
    assert status_of_a_large_post(port, "/login/", cookie(seeded["operator"])) == 413
    assert status_of_a_large_post(port, api) == 413
    assert status_of_a_large_post(port, page) == 413
    # a login or token is checked before the body is stored: made-up ones are refused
    assert status_of_a_large_post(port, page, b"Cookie: sessionid=x\r\n") == 413
    assert status_of_a_large_post(port, api, bearer("zop_" + "x" * 43)) == 413
    assert status_of_a_large_post(port, page, bearer(seeded["operator_token"])) == 413
    # an operator's real ones reach Django, which answers as it would
    assert status_of_a_large_post(port, page, cookie(seeded["operator"])) != 413
    assert status_of_a_large_post(port, api, cookie(seeded["operator"])) != 413
    assert status_of_a_large_post(port, api, bearer(seeded["operator_token"])) != 413
    # a viewer may not upload: neither may they make the server store an upload
    assert status_of_a_large_post(port, page, cookie(seeded["viewer"])) == 413
    assert status_of_a_large_post(port, api, bearer(seeded["viewer_token"])) == 413


def test_past_a_few_large_bodies_at_once_the_next_is_answered_503(web, seeded):
    port, page = web, "/projects/alpha/images/"
    held = [
        socket.create_connection(("127.0.0.1", port), timeout=BOUND) for _ in range(LARGE_BODIES)
    ]
    expect = cookie(seeded["operator"]) + b"Expect: 100-continue\r\n"
    try:
        for sock in held:  # the server says to go on once it holds room for the body
            sock.sendall(large_post_head(page, expect))
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        assert status_of_a_large_post(port, page, cookie(seeded["operator"])) == 503
    finally:
        for sock in held:
            sock.close()


def test_a_credential_check_that_fails_refuses_the_large_body(monkeypatch):
    """In process: the check runs in the server's I/O loop, which must keep going."""
    import instances.services.uploads

    def broken(**_: str) -> bool:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(instances.services.uploads, "upload_allowed", broken)
    adjustments = Adjustments(max_request_body_size=2 * SMALL_BODY_BYTES)
    parser = BodyLimitParser(adjustments, threading.Semaphore(LARGE_BODIES))
    parser.received(large_post_head("/projects/alpha/images/", b"Cookie: sessionid=x\r\n"))
    assert parser.error is not None and parser.error.code == 413
