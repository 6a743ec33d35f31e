"""The Celery application: configured from Django settings (CELERY_*), tasks found in the apps."""

import os
import socket

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")

app = Celery("zopday")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def freeze_startup_objects(**kwargs: object) -> None:
    """Once the worker has loaded every app and task, before its pool starts: prefork children
    inherit the frozen objects untouched (see instances.memory)."""
    from instances import memory

    memory.freeze_startup_objects()


@signals.worker_ready.connect
def reconcile_this_host(**kwargs: object) -> None:
    """A worker that starts has this host reconciled at once: what a dead worker left is taken
    up in seconds, not at the next beat (instances.tasks.reconcile_host)."""
    from django.conf import settings

    host = settings.ZOPDAY_HOST
    app.send_task(
        "instances.reconcile_host",
        args=[host],
        queue=f"host.{host}",
        expires=30,
        ignore_result=True,
    )


@signals.worker_ready.connect
def relay_the_outbox(**kwargs: object) -> None:
    """Every worker publishes the messages its broker missed (instances.services.outbox)."""
    from django.conf import settings

    from instances.services.outbox import outbox_relay_start

    if settings.ZOPDAY_OUTBOX_RELAY:
        outbox_relay_start()


@signals.task_prerun.connect
@signals.task_postrun.connect
def close_old_connections(**kwargs: object) -> None:
    """Keep database connections between tasks the way Django keeps them between requests: up
    to CONN_MAX_AGE, and never after an error. (Celery's own fixup would close them around every
    task, as CELERY_DB_REUSE_MAX says it may not: a new connection per task costs more than
    many a task.)"""
    from django.db import close_old_connections

    close_old_connections()


@app.task(name="zopday.ping", ignore_result=False)
def ping() -> dict[str, str | int]:
    """Answer with the worker's host and process: proves a message went through the broker."""
    return {"pong": socket.gethostname(), "pid": os.getpid()}
