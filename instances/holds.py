"""Test-only hold points: kill tests set ZOPDAY_TEST_HOLD to stop a worker's work at a point."""

import os
import time
from pathlib import Path


def hold_point(name: str) -> None:
    """With ZOPDAY_TEST_HOLD=<folder> and `name` in <folder>/point: write <folder>/held and
    wait here forever, for the test to kill the worker at this point."""
    folder = os.environ.get("ZOPDAY_TEST_HOLD")
    if not folder:
        return
    try:
        wanted = (Path(folder) / "point").read_text().strip()
    except OSError:
        return
    if wanted != name:
        return
    (Path(folder) / "held").write_text(f"{name} {os.getpid()}\n")
    while True:
        time.sleep(3600)


def fail_point(name: str) -> bool:
    """With ZOPDAY_TEST_HOLD=<folder> and `name` in <folder>/fail: remove that file and answer
    True once, for the caller to fail there as a busy monitor does (a retryable error)."""
    folder = os.environ.get("ZOPDAY_TEST_HOLD")
    if not folder:
        return False
    fail = Path(folder) / "fail"
    try:
        wanted = fail.read_text().strip()
    except OSError:
        return False
    if wanted != name:
        return False
    fail.unlink(missing_ok=True)
    return True
