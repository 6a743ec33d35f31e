"""scripts/supervisord_run.py: when the run folder's disk fills up, the processes' output goes on
reaching the terminal, with one line saying the disk is full instead of a traceback per line.

The run folder is a tmpfs of 1 MiB this test mounts (as root) and unmounts.
"""

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import ROOT
from tests.zopday.run_command import ZopRun, free_port
from tests.zopday.run_command import supervisor_config as generated_config

pytestmark = pytest.mark.integration

LINES = 200
# says ready, waits for the test to fill the disk, then writes LINES lines
TALKER = """
import os, sys, time
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
for n in range(%d):
    print(f"line {n} " + "x" * 200, flush=True)
print("done", flush=True)
time.sleep(3600)
"""


@pytest.fixture
def small_run_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=700", "tmpfs", folder], check=True)
    (folder / "log").mkdir()
    yield folder
    subprocess.run(["umount", "--lazy", folder], check=True)


def talker_only_config(run_dir: Path, go: Path) -> Path:
    """bin/zop's own configuration with the log listener and, as its only program, the talker."""
    text = generated_config(ROOT, run_dir, "127.0.0.1", free_port())
    kept = [s for s in re.split(r"\n(?=\[)", text) if not s.startswith("[program:")]
    talker = run_dir.parent / "talker.py"
    talker.write_text(TALKER % LINES)
    kept.append(
        f"[program:talk]\ncommand={sys.executable} {talker} {go}\nredirect_stderr=true\n"
        f"stdout_logfile={run_dir}/log/talk.log\nstdout_events_enabled=true\n"
    )
    path = run_dir / "supervisord.conf"
    path.write_text("\n".join(kept) + "\n")
    return path


def test_a_full_run_folder_keeps_the_output_on_the_terminal_and_says_the_disk_is_full(
    small_run_folder, tmp_path
):
    go = tmp_path / "go"
    conf = talker_only_config(small_run_folder, go)
    script = 'source "$1/bin/zop" && supervise "$2"'
    run = ZopRun(ROOT, small_run_folder, ["bash", "-c", script, "zop", str(ROOT), str(conf)])
    try:
        run.wait_for_line(r"^talk +\| ready")
        with contextlib.suppress(OSError), (small_run_folder / "ballast").open("wb") as ballast:
            while True:
                ballast.write(b"\1" * 2**16)
                ballast.flush()
        go.touch()
        run.wait_for_line(r"^talk +\| done")
    finally:
        run.ctrl_c()
    shown = [line for line in run.lines if line.startswith("talk ")]
    assert [line.split()[3] for line in shown[1:-1]] == [str(n) for n in range(LINES)]
    told = [line for line in run.lines if "the disk is full" in line]
    assert len(told) == 1 and f"{small_run_folder}/log/talk.log" in told[0]
    assert "Traceback" not in run.output
