"""The Celery application: configured from Django settings (CELERY_*), tasks found in the apps."""

import os
import socket

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")

app = Celery("zopday")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
@signals.task_postrun.connect
def close_old_connections(**kwargs: object) -> None:
    """Keep database connections between tasks the way Django keeps them between requests: up
    to CONN_MAX_AGE, and never after an error. (Celery's own fixup would close them around every
    task, as CELERY_DB_REUSE_MAX says it may not: a new connection per task costs more than
    many a task.)"""
    from django.db import close_old_connections

    close_old_connections()


@app.task(name="zopday.ping")
def ping() -> dict[str, str | int]:
    """Answer with the worker's host and process: proves a message went through the broker."""
    return {"pong": socket.gethostname(), "pid": os.getpid()}
