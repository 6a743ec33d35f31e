"""Real processes the integration tests start: a Celery worker on the test database."""

import os
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def database_url_for_children() -> str:
    """The test database as a URL, so a child process uses the same one pytest-django made."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    user, password = db.get("USER", ""), db.get("PASSWORD", "")
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def start_celery_worker(log_path: Path) -> subprocess.Popen:
    """A real worker process (4 threads) on this host's general and host queues (its imports have
    a worker of their own, start_celery_worker_on); returns once it answers a ping."""
    from zopday.celery import app

    env = {
        **os.environ, "DATABASE_URL": database_url_for_children(), "PYTHONUNBUFFERED": "1",
        "ZOPDAY_OUTBOX_RELAY": "false",  # the outbox tests' own (start_celery_worker_on)
    }  # fmt: skip
    queues = f"celery,host.{settings.ZOPDAY_HOST}"
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "zopday", "worker", "--pool", "threads", "-c", "4",
         "--loglevel", "INFO", "-Q", queues, "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited: {log_path.read_text()[-2000:]}")
        if app.control.ping(timeout=0.5):
            return process
    process.kill()
    raise RuntimeError(f"the Celery worker did not answer in 60 s: {log_path.read_text()[-2000:]}")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_console_proxy(port: int, origins: list[str], log_path: Path) -> subprocess.Popen:
    """`manage.py consoleproxy` on the test database; returns once /healthz answers."""
    import urllib.request

    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "PYTHONUNBUFFERED": "1",
        "CONSOLEPROXY_ALLOWED_ORIGINS": ",".join(origins),
        "ZOPDAY_MACHINES_DIR": str(settings.ZOPDAY_MACHINES_DIR),
        "ZOPDAY_RUN_DIR": str(settings.RUN_DIR),
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the proxy must keep Django's async safety on
    process = subprocess.Popen(
        [sys.executable, "manage.py", "consoleproxy", "--host", "localhost", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the console proxy exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the console proxy did not answer in 30 s: {log_path.read_text()[-2000:]}")


def start_celery_worker_on(
    log_path: Path, queues: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """A real worker (4 threads) on the given queues with extra environment; returns once it
    answers a ping addressed to it."""
    from zopday.celery import app

    name = f"w{time.monotonic_ns()}@{settings.ZOPDAY_HOST}"
    # Relaying is the outbox tests' own: a worker on the suite's broker would otherwise take a
    # message those tests' private broker is meant to carry.
    full_env = {
        **os.environ, "DATABASE_URL": database_url_for_children(), "PYTHONUNBUFFERED": "1",
        "ZOPDAY_OUTBOX_RELAY": "false", **(env or {}),
    }  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "zopday", "worker", "--pool", "threads", "-c", "4",
         "--loglevel", "INFO", "-Q", queues, "-n", name, "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=full_env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited: {log_path.read_text()[-2000:]}")
        if app.control.ping(destination=[name], timeout=0.5):
            return process
    process.kill()
    raise RuntimeError(f"the Celery worker did not answer in 60 s: {log_path.read_text()[-2000:]}")


class HostOfImports:
    """A host of a test's own, with its two workers as bin/zop run starts them: one on its host
    queue, one on its import queue, both keeping images in the test's folder. kill() is kill -9
    of the import worker, start() a fresh one."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None) -> None:
        import uuid

        self.name, self.folder = f"imp-{uuid.uuid4().hex[:8]}", folder
        self.images = folder / "images"
        self.env = {"ZOPDAY_HOST": self.name, "ZOPDAY_IMAGES_DIR": str(self.images), **(env or {})}
        self.host_process: subprocess.Popen | None = None
        self.process: subprocess.Popen | None = None
        self.started = 0

    def start(self) -> None:
        if self.host_process is None or self.host_process.poll() is not None:
            log = self.folder / "host-worker.log"
            self.host_process = start_celery_worker_on(log, f"host.{self.name}", self.env)
        self.started += 1
        log = self.folder / f"worker-{self.started}.log"
        self.process = start_celery_worker_on(log, f"imports.{self.name}", self.env)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        from tests.broker import BrokerQueue

        for process in (self.process, self.host_process):
            if process is not None and process.poll() is None:
                stop(process)
        BrokerQueue(f"host.{self.name}").forget()
        BrokerQueue(f"imports.{self.name}").forget()
