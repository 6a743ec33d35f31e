"""supervisord killed: its processes die with it instead of running on unsupervised, and while
a console runs from a run folder a second `bin/zop run` there is refused, naming its pid."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.services import ROOT
from tests.zopday.run_command import (
    ZopRun,
    descendants,
    free_port,
    http_status,
    is_alive,
    wait_all_gone,
)
from tests.zopday.run_command import supervisor_config as generated_config

pytestmark = pytest.mark.integration

# A reduced console: a program of each kind (a plain process, the web server, a Celery worker
# whose pool processes are grandchildren of supervisord) and the log listener.
PROGRAMS = {"redis", "web", "worker"}


def reduced_config(run_dir: Path, port: int) -> Path:
    """bin/zop's own configuration for this run folder, with only PROGRAMS' sections."""
    text = generated_config(ROOT, run_dir, "127.0.0.1", port)
    kept = [
        section
        for section in re.split(r"\n(?=\[)", text)
        if not (head := re.match(r"\[program:(\S+)\]", section)) or head[1] in PROGRAMS
    ]
    path = run_dir / "supervisord.conf"
    path.write_text("\n".join(kept) + "\n")
    return path


def supervised(run_dir: Path, port: int) -> ZopRun:
    """What the end of `bin/zop run` does (hold the run folder, supervise), on the reduced
    configuration, through bin/zop's own functions."""
    conf = reduced_config(run_dir, port)
    script = 'source "$1/bin/zop" && hold_run_folder && supervise "$2"'
    run = ZopRun(ROOT, run_dir, ["bash", "-c", script, "zop", str(ROOT), str(conf)])
    run.port, run.url = port, f"http://127.0.0.1:{port}/"
    return run


def test_killing_supervisord_ends_its_processes_and_a_second_run_is_refused_meanwhile(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "log").mkdir(parents=True)
    run = supervised(run_dir, free_port())
    children: set[int] = set()
    try:
        run.wait_for_page("login/")
        run.wait_for_line(r"general@\S+ ready")
        supervisord = int((run_dir / "supervisord.pid").read_text())
        children = descendants(supervisord)
        assert len(children) >= 6  # redis, web, the worker and its 2 pool processes, listener

        second = subprocess.run(
            [str(ROOT / "bin" / "zop"), "run"], cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "ZOPDAY_RUN_DIR": str(run_dir)}, timeout=120,
        )  # fmt: skip
        said = re.sub(r"\x1b\[[0-9;]*m", "", second.stderr)
        assert second.returncode != 0
        assert f"the console already runs from {run_dir} (pid {run.process.pid})" in said

        os.kill(supervisord, signal.SIGKILL)
        assert wait_all_gone(children, timeout=30) == [], "left running unsupervised"
        assert run.process.wait(timeout=60) != 0
        assert "supervisord was ended by signal 9; its processes ended with it" in run.output
        assert http_status(run.url + "login/") == 0  # the port is free for the next run
    finally:
        for pid in children | descendants(run.process.pid):  # whatever outlived the test
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)
        run.kill()

    # the folder is free again: the next run holds it
    again = subprocess.run(
        ["bash", "-c", 'source "$1/bin/zop" && hold_run_folder && echo held', "zop", str(ROOT)],
        env={**os.environ, "ZOPDAY_RUN_DIR": str(run_dir)}, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert again.stdout.strip() == "held", again.stderr
