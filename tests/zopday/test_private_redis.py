"""The private Redis of `bin/zop run` keeps what is queued across a crash and a restart."""

import shutil
import tempfile
from pathlib import Path

import pytest
from celery import current_app

from tests.broker import BrokerQueue
from tests.redis_server import RedisServer, celery_app_on, zop_redis_command

pytestmark = pytest.mark.integration


@pytest.fixture
def folder():
    path = Path(tempfile.mkdtemp(prefix="zr", dir="/tmp"))  # a unix socket's path is short
    yield path
    shutil.rmtree(path)


def test_the_runs_redis_killed_and_started_again_still_holds_a_queued_message(folder):
    socket = folder / "redis.sock"
    server = RedisServer(folder, zop_redis_command(socket, folder, "yes"))
    server.start()
    try:
        with celery_app_on(server.url):
            current_app.send_task("zopday.ping", args=[7], queue="parked", ignore_result=True)
            server.kill()
            server.start()
            [sent] = BrokerQueue("parked").sent()
    finally:
        server.kill()
    assert (sent.task, sent.args) == ("zopday.ping", (7,))


def test_the_tests_redis_keeps_nothing_on_disk(folder):
    command = zop_redis_command(folder / "redis.sock", folder)
    assert command[command.index("--appendonly") + 1] == "no"
