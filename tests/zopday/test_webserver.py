"""The web server of `bin/zop run` against slow clients: started with the very command bin/zop
gives supervisord, it answers while many sockets drip their headers, and cuts slow ones off."""

import contextlib
import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import ROOT
from tests.zopday.run_command import (
    NOT_INHERITED,
    free_port,
    http_status,
    program_commands,
    supervisor_config,
)
from zopday.webserver import SMALL_BODY_BYTES

pytestmark = pytest.mark.integration

SLOW_CLIENTS = 12  # more than gunicorn's 2 sync workers and than the server's 8 threads
DRIP_SECONDS = 0.3
BOUND = 90  # generous: on a server that queues requests behind slow clients, minutes pass


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Iterator[int]:
    """The `web` program of bin/zop's supervisord configuration, on an empty run folder."""
    run_dir: Path = tmp_path_factory.mktemp("run")
    port = free_port()
    command = program_commands(supervisor_config(ROOT, run_dir, "127.0.0.1", port))["web"]
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env |= {"ZOPDAY_RUN_DIR": str(run_dir), "PYTHONPATH": str(ROOT)}
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


def status_of_a_large_post(port: int, path: str, headers: bytes = b"") -> int:
    """POST a body just past a form's limit to path; the status the server answers with."""
    size = SMALL_BODY_BYTES + 1
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n".encode()
            + b"Content-Type: application/octet-stream\r\nConnection: close\r\n"
            + headers
            + b"\r\n"
        )
        with contextlib.suppress(OSError):  # a refusal closes before the body is all sent
            sock.sendall(b"\0" * size)
        return int(sock.makefile("rb").readline().split()[1])


def test_only_an_image_upload_with_credentials_may_send_a_large_body(web):
    port = web
    upload = "/projects/alpha/images/"
    assert status_of_a_large_post(port, "/login/") == 413
    assert status_of_a_large_post(port, "/api/v1/projects/alpha/images") == 413
    assert status_of_a_large_post(port, upload) == 413
    # with a (here unknown) login shown, Django reads it and answers as it would
    assert status_of_a_large_post(port, upload, b"Cookie: sessionid=x\r\n") != 413
    assert (
        status_of_a_large_post(
            port, "/api/v1/projects/alpha/images", b"Authorization: Bearer x\r\n"
        )
        != 413
    )
