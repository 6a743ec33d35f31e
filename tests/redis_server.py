"""A redis-server of a test's own, on a unix socket, that the test kills and starts again; and
the Celery app of the test process pointed at it."""

import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent


def zop_redis_command(socket: Path, run_dir: Path, persist: str = "") -> list[str]:
    """The redis-server command line bin/zop starts (PERSIST "yes" as for `bin/zop run`)."""
    script = (ROOT / "bin" / "zop").read_text()
    function = re.search(r"^start_private_redis_cmd\(\) \{.*?^\}", script, re.M | re.S)
    assert function, "bin/zop defines no start_private_redis_cmd"
    line = subprocess.run(
        ["bash", "-c", f"{function[0]}\nstart_private_redis_cmd {socket} {persist}"],
        env={"ZOPDAY_RUN_DIR": str(run_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return shlex.split(line)


class RedisServer:
    """One redis-server process at a time, on the same socket across restarts."""

    def __init__(self, folder: Path, command: list[str] | None = None) -> None:
        self.socket = folder / "redis.sock"
        self.log = folder / "redis.log"
        self.command = command or zop_redis_command(self.socket, folder)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdout=self.log.open("a"), stderr=subprocess.STDOUT
        )
        client = redis.Redis(unix_socket_path=str(self.socket))
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, f"redis-server exited: {self.log.read_text()}"
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not answer in 30 s"
                time.sleep(0.05)

    def kill(self) -> None:
        """kill -9, as a crash or the OOM killer would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def celery_app_on(url: str) -> Iterator[None]:
    """The test process's Celery app sends to (and reads from) the broker at url meanwhile."""
    from kombu import pools

    from zopday.celery import app

    def drop_connections() -> None:
        # kombu keeps one pool per broker in a registry of its own: a pool closed but left
        # there would be handed back to the app for the same broker later
        pools.reset()
        app._pool = None
        app.amqp._producer_pool = None

    before = app.conf.broker_url
    drop_connections()
    app.conf.broker_url = url
    try:
        yield
    finally:
        drop_connections()
        app.conf.broker_url = before
