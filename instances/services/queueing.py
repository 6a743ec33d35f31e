"""Queueing work for the workers once the caller's transaction has committed."""

from celery import current_app
from django.conf import settings
from django.db import transaction

from instances.backends import is_local_backend
from instances.models import Instance


def host_queue(instance: Instance) -> str:
    """Node-local work runs on the instance's hypervisor host's own queue; work on a cloud VM is
    API calls that any worker can make, so it goes to the shared queue every worker consumes."""
    if not is_local_backend(instance.backend):
        return str(settings.ZOPDAY_CLOUD_QUEUE)
    return f"host.{instance.host}"


def enqueue_on_host(host: str, task_name: str, *args: object) -> None:
    """Send node work that belongs to no instance (a free disk's file) to that host's queue once
    the surrounding transaction has committed."""
    send_on_commit(task_name, *args, queue=f"host.{host}")


def enqueue_host_task(
    instance: Instance, task_name: str, *args: object, countdown: float = 0
) -> None:
    """Send the task once the surrounding transaction has committed (to run `countdown`
    seconds later, if given)."""
    send_on_commit(task_name, *args, queue=host_queue(instance), countdown=countdown)


def send_on_commit(task_name: str, *args: object, queue: str, countdown: float = 0) -> None:
    """Send a task by name once the surrounding transaction has committed (at once outside one),
    so the worker reads what the caller wrote. Nobody waits for its result."""
    options = {"countdown": countdown} if countdown else {}
    transaction.on_commit(
        lambda: current_app.send_task(
            task_name, args=args, queue=queue, ignore_result=True, **options
        )
    )
