"""Callers of one QMP monitor take turns on a lock file beside its socket."""

import fcntl
import threading
import time

import pytest

from instances.backends.base import BackendError
from instances.backends.qemu.turns import socket_turn


def test_a_second_caller_waits_for_the_first_to_finish(tmp_path):
    socket_path = tmp_path / "qmp.sock"
    order: list[str] = []

    def first() -> None:
        with socket_turn(socket_path, timeout=5, what="QEMU's monitor"):
            order.append("first in")
            time.sleep(0.2)
            order.append("first out")

    holder = threading.Thread(target=first)
    holder.start()
    while not order:
        time.sleep(0.01)
    with socket_turn(socket_path, timeout=5, what="QEMU's monitor"):
        order.append("second in")
    holder.join()
    assert order == ["first in", "first out", "second in"]


def test_a_monitor_that_stays_busy_is_a_retryable_error_naming_it(tmp_path):
    socket_path = tmp_path / "qmp.sock"
    with open(tmp_path / "qmp.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with (
            pytest.raises(BackendError, match="QEMU's monitor stayed busy for 0.1 s") as raised,
            socket_turn(socket_path, timeout=0.1, what="QEMU's monitor"),
        ):
            pass
    assert raised.value.retryable


def test_a_run_folder_that_is_gone_is_a_clear_error(tmp_path):
    with (
        pytest.raises(BackendError, match="QEMU's monitor is not available"),
        socket_turn(tmp_path / "gone" / "qmp.sock", timeout=1, what="QEMU's monitor"),
    ):
        pass
