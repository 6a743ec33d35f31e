"""What the benchmarks that drive the console's own stack share: a run folder with a fresh
SQLite database, Django set up as deployed, a private Redis and a real Celery worker.

Importing it sets the environment and Django up, so it comes before any import of the apps.
A child process the benchmark starts finds the same run folder through ZOPDAY_BENCH_WORK."""

import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = Path(os.environ.get("ZOPDAY_BENCH_WORK") or tempfile.mkdtemp(prefix="zb", dir="/tmp"))
os.environ.update(
    ZOPDAY_BENCH_WORK=str(WORK),
    ZOPDAY_RUN_DIR=str(WORK / "run"),
    ZOPDAY_MACHINES_DIR=str(WORK / "m"),
    ZOPDAY_IMAGES_DIR=str(ROOT / "var" / "images"),
    ZOPDAY_NETWORK_MODE="user",
    REDIS_URL=f"redis+socket://{WORK / 'redis.sock'}",
    DJANGO_SETTINGS_MODULE="zopday.settings",
    ZOPDAY_LOG_LEVEL="WARNING",
    ZOPDAY_DEBUG="false",  # as deployed: Django's debug mode logs every SQL query it runs
)
os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402

from instances.access import instance_for_user  # noqa: E402
from instances.models import Instance  # noqa: E402


def wait(predicate, what: str, timeout: float = 120.0, step: float = 0.01):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(step)
    return value


def start_redis() -> subprocess.Popen:
    """The run's private Redis, on a unix socket; returns once it listens."""
    redis = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(WORK / "redis.sock"), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait(lambda: (WORK / "redis.sock").exists(), "Redis", 30)
    return redis


def start_services(queues: str) -> list[subprocess.Popen]:
    """A private Redis and a worker on `queues`, started as `bin/zop run` starts its workers."""
    redis = start_redis()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "zopday", "worker", "-n", "host@%h", "--loglevel",
         "INFO", "--pool", "threads", "--concurrency", "8", "-Q", queues],
        cwd=ROOT, stdout=(WORK / "worker.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    from zopday.celery import app

    wait(lambda: app.control.ping(timeout=0.5), "the worker", 60, 0.2)
    return [worker, redis]


def provisioning_workers(queue: str, count: int = 2) -> list[subprocess.Popen]:
    """`count` Celery workers on the provisioning queue `queue`, one job at a time each (a
    threads pool of 1, no gossip or mingle); returns once every one answers a ping."""
    workers = []
    for number in range(count):
        argv = [sys.executable, "-m", "celery", "-A", "zopday", "worker", "--pool", "threads",
                "-c", "1", "-Q", queue, "-n", f"bench{number}@%h", "--without-gossip",
                "--without-mingle", "--loglevel", "WARNING"]  # fmt: skip
        log = (WORK / f"worker{number}.log").open("w")
        workers.append(subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
    from zopday.celery import app

    wait(lambda: len(app.control.ping(timeout=0.5)) >= count, "the workers", 60, 0.2)
    return workers


def jobs_settled(ids: list[int]) -> None:
    """Wait until none of the provisioning jobs `ids` is still in a transitional status."""
    from provisioning.choices import JOB_TRANSITIONAL
    from provisioning.models import ProvisioningJob

    pending = ProvisioningJob.objects.filter(pk__in=ids, status__in=JOB_TRANSITIONAL)
    wait(lambda: not pending.exists(), "the jobs", 600, 0.02)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def state_reader(instance_id: int):  # type: ignore[no-untyped-def]
    """Reads the instance's state as the database holds it, with sqlite3 itself: the ORM's own
    cost per read (most of a millisecond here) would add to the console's time and take CPU from
    the worker and QEMU, polled every 0.5 ms."""
    db = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None)
    query = "SELECT power_state FROM instances_instance WHERE id = ?"
    return lambda: db.execute(query, (instance_id,)).fetchone()[0]


def as_the_view(instance: Instance, user) -> tuple[Instance, object]:  # type: ignore[no-untyped-def]
    """What a power button's view has done when it calls the service: a request's own user
    object, and the instance read with the user's role (which the service then checks)."""
    request_user = get_user_model().objects.get(pk=user.pk)
    instance, _ = instance_for_user(request_user, instance.project.slug, instance.pk)
    _ = instance.project  # loaded by the page's access check
    return instance, request_user
