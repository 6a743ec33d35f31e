"""README command 1: the console comes up, and Ctrl-C leaves nothing behind."""

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.services import ROOT

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def is_alive(pid: int) -> bool:
    """Running or sleeping; a zombie is already dead and only waits for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_line(process: subprocess.Popen, pattern: str, seen: list[str]) -> re.Match:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if match := re.search(pattern, line):
            return match
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def test_the_run_command_serves_the_console_and_stops_cleanly_on_ctrl_c(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env |= {
        "ZOPDAY_RUN_DIR": str(tmp_path / "run"),
        "ZOPDAY_PORT": str(port),
        "CONSOLEPROXY_PORT": str(free_port()),
        "ZOPDAY_MOTO_PORT": str(free_port()),
        "NO_COLOR": "1",
    }
    process = subprocess.Popen(
        [str(ROOT / "bin" / "zop"), "run"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        url = wait_for_line(process, r"ZopDay console: (http://\S+)", seen).group(1)
        password = wait_for_line(process, r"password (\S+)\)", seen).group(1)
        wait_for_line(process, r"Listening at", seen)
        for worker in (r"worker.*general@\S+ ready", r"hostworker.*host@\S+ ready"):
            if not any(re.search(worker, line) for line in seen):  # in either order
                wait_for_line(process, worker, seen)

        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        login_page = browser.open(url).read().decode()
        assert "Log in to ZopDay" in login_page
        token = next(c.value for c in jar if c.name == "csrftoken")
        form = urllib.parse.urlencode(
            {"username": "demo-operator", "password": password, "csrfmiddlewaretoken": token}
        ).encode()
        landed = browser.open(urllib.request.Request(url + "login/", data=form))
        assert landed.url == url + "projects/demo/"
        assert "Demo" in landed.read().decode()

        children = descendants(process.pid)
        assert len(children) >= 5
    finally:
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        process.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in children if is_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], f"left behind: {alive}"
    assert not (tmp_path / "run" / "redis.sock").exists()
