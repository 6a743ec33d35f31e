"""README command 1 as a new user meets it: a fresh clone, no .venv and no var/, to the login page.

pip takes the packages from its cache when it has them, but the virtualenv is a new one. About
80-100 s on 2 shared cores (the demo image build and the package installation take most of it).
"""

import subprocess
import time

import pytest

from tests.services import ROOT
from tests.zopday.run_command import ZopRun, descendants, not_private, wait_all_gone

pytestmark = pytest.mark.integration


def test_a_fresh_clone_serves_its_login_page_and_stops_cleanly_on_ctrl_c(tmp_path):
    clone = tmp_path / "zopday"
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", head], check=True)
    assert not (clone / ".venv").exists() and not (clone / "var").exists()

    started = time.monotonic()
    run = ZopRun(clone, clone / "var")
    try:
        run.wait_for_page("login/", timeout=400)
        first_page = time.monotonic() - started
        children = descendants(run.process.pid)
        assert not_private(clone / "var") == []
    finally:
        code = run.ctrl_c() if run.process.poll() is None else run.process.returncode
        run.kill()
    print(f"fresh clone: first 200 after {first_page:.0f} s")
    assert code == 0, run.output[-6000:]
    assert "the console stopped; no guests are running" in run.output
    assert wait_all_gone(children) == [], "left behind"
