"""The Celery application: configured from Django settings (CELERY_*), tasks found in the apps."""

import os
import socket

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")

app = Celery("zopday")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="zopday.ping")
def ping() -> dict[str, str | int]:
    """Answer with the worker's host and process: proves a message went through the broker."""
    return {"pong": socket.gethostname(), "pid": os.getpid()}
