"""A full run folder (SQLite and all on a tmpfs of a few MiB, filled to the brim): logging in,
reading pages, calling the API with a token and removing an image still work; a write answers
503 saying why."""

import html
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.db import OperationalError

from instances import disk_full
from instances.disk_full import DISK_FULL_MESSAGE, unless_disk_full

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def full_run_folder():
    folder = Path(tempfile.mkdtemp(prefix="zd", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=700", "tmpfs", folder], check=True)
    yield folder
    subprocess.run(["umount", "--lazy", folder], check=True)
    folder.rmdir()


def test_a_full_run_folder_lets_users_in_and_refuses_writes_saying_why(full_run_folder):
    env = {**os.environ, "ZOPDAY_RUN_DIR": str(full_run_folder), "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)  # SQLite in the run folder, as bin/zop run keeps it
    done = subprocess.run(
        [sys.executable, "-m", "tests.instances.disk_full_console"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)

    assert answers["login page"] == 200
    assert answers["login"] == [302, "/"]
    assert answers["page after login"] == 200  # the session holds, though none could be stored
    assert answers["token read"] == 200
    status, page = answers["key added on the page"]
    assert status == 503 and DISK_FULL_MESSAGE in html.unescape(page)
    status, body = answers["key added by the api"]
    assert status == 503 and json.loads(body)["detail"] == DISK_FULL_MESSAGE
    assert answers["image removed"] == [302, False]  # the console frees space itself
    status, page = answers["start refused to a viewer"]  # its audit event cannot be stored
    assert status == 200 and "Needs the operator role." in html.unescape(page)


@pytest.mark.django_db
def test_a_full_disk_is_told_in_one_warning_a_minute_however_often_it_is_met(caplog, monkeypatch):
    monkeypatch.setattr(disk_full, "full_told_at", [float("-inf")])
    for _ in range(3):
        with unless_disk_full("the last login time"):
            raise OperationalError("could not extend file: No space left on device")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "The disk is full (the last login time was not saved). Free space on the host: "
        "nothing is saved meanwhile."
    ]
