"""README command 1 under supervision: a process that dies is restarted while the others keep
serving, the run folder stays private, and Ctrl-C stops the console but leaves its guests running."""

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.services import ROOT
from tests.zopday.run_command import (
    ZopRun,
    descendants,
    http_status,
    is_alive,
    not_private,
    wait_all_gone,
)

pytestmark = pytest.mark.integration

VENV = ROOT / ".venv"


def api(run: ZopRun, token: str, method: str, path: str) -> dict:
    request = urllib.request.Request(
        run.url + "api/v1/" + path, method=method, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def log_in(run: ZopRun, password: str) -> None:
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    assert "Log in to ZopDay" in browser.open(run.url).read().decode()
    token = next(c.value for c in jar if c.name == "csrftoken")
    form = urllib.parse.urlencode(
        {"username": "demo-operator", "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    landed = browser.open(urllib.request.Request(run.url + "login/", data=form))
    assert landed.url == run.url + "projects/demo/"


def start_demo_vm(run: ZopRun) -> None:
    """Start demo-vm through the API and wait until it runs: a guest for Ctrl-C to leave alone."""
    env = {**os.environ, "ZOPDAY_RUN_DIR": str(run.run_dir)}
    env.pop("DATABASE_URL", None)
    token = subprocess.run(
        [str(VENV / "bin" / "python"), "manage.py", "api_token", "create", "demo-operator", "t"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    vm = next(
        i
        for i in api(run, token, "GET", "projects/demo/instances")["items"]
        if i["name"] == "demo-vm"
    )
    api(run, token, "POST", f"projects/demo/instances/{vm['id']}/start")
    deadline = time.monotonic() + 120
    while (
        state := api(run, token, "GET", f"projects/demo/instances/{vm['id']}")["power_state"]
    ) != "running":
        assert time.monotonic() < deadline, f"demo-vm is {state}:\n{run.output[-4000:]}"
        time.sleep(0.5)


def qemu_pids(run: ZopRun) -> set[int]:
    pids = set()
    for pidfile in (run.run_dir / "machines").glob("*/pid"):
        pid = int(pidfile.read_text())
        if is_alive(pid) and b"qemu" in Path(f"/proc/{pid}/cmdline").read_bytes():
            pids.add(pid)
    return pids


def test_a_killed_process_is_restarted_and_ctrl_c_leaves_the_guests_running(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    (run_dir / "secret_key").write_text("an-older-run-left-this-world-readable")
    (run_dir / "secret_key").chmod(0o644)

    run = ZopRun(ROOT, run_dir)
    guests: set[int] = set()
    try:
        password = run.wait_for_line(r"password (\S+)\)").group(1)
        run.wait_for_page("login/")
        for ready in (r"general@\S+ ready", r"host@\S+ ready", r"consoleproxy +\| .*listening"):
            run.wait_for_line(ready)
        log_in(run, password)
        assert not_private(run_dir) == []

        # the console proxy dies: it comes back, the pages never go away
        web = run.supervisorctl("pid", "web", venv=VENV).strip()
        proxy = int(run.supervisorctl("pid", "consoleproxy", venv=VENV))
        os.kill(proxy, signal.SIGKILL)
        assert http_status(run.url + "login/") == 200
        run.wait_for_line(r"exited: consoleproxy \(terminated by SIGKILL; not expected\)")
        run.wait_for_line(rf"spawned: 'consoleproxy' with pid (?!{proxy}\b)\d+", timeout=30)
        deadline = time.monotonic() + 30
        while http_status(f"http://127.0.0.1:{run.proxy_port}/healthz") != 200:
            assert time.monotonic() < deadline, run.output[-4000:]
            time.sleep(0.2)
        assert http_status(run.url + "login/") == 200
        assert run.supervisorctl("pid", "web", venv=VENV).strip() == web

        start_demo_vm(run)
        guests = qemu_pids(run)
        assert len(guests) == 1
        children = descendants(run.process.pid)
        assert guests.isdisjoint(children)  # QEMU daemonizes into a session of its own
    finally:
        code = run.ctrl_c() if run.process.poll() is None else run.process.returncode
        run.kill()
        still_running = [pid for pid in guests if is_alive(pid)]
        for pid in guests:  # clean up the guest this test started
            os.kill(pid, signal.SIGKILL)
    assert code == 0, run.output[-6000:]
    assert "the console stopped; 1 guest keeps running; the next run adopts it" in run.output
    assert still_running == list(guests)
    assert wait_all_gone(children) == [], "left behind"
    assert not (run_dir / "redis.sock").exists()


def test_a_failing_step_says_what_failed_and_what_to_do(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env |= {
        "ZOPDAY_RUN_DIR": str(blocker / "run"),
        "ZOPDAY_IMAGES_DIR": str(ROOT / "var" / "images"),
    }
    result = subprocess.run(
        [str(ROOT / "bin" / "zop"), "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = re.sub(r"\x1b\[[0-9;]*m", "", result.stderr)  # without the bold and red
    assert result.returncode != 0
    assert f"zop: creating the run folder {blocker / 'run'} failed" in said
    assert "zop: point ZOPDAY_RUN_DIR at a folder you may write" in said
