"""Queueing work for the workers once the caller's transaction has committed."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from instances.backends import is_local_backend
from instances.models import Instance, OutboxMessage
from instances.services import outbox


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
    """Write the task's message in the caller's transaction (at once outside one) and publish it
    once that commits, so the worker reads what the caller wrote; if the broker is down, the
    outbox relay publishes it later (services.outbox). Nobody waits for its result."""
    eta = timezone.now() + timedelta(seconds=countdown) if countdown else None
    message = OutboxMessage.objects.create(task=task_name, args=list(args), queue=queue, eta=eta)
    transaction.on_commit(lambda: outbox.outbox_publish(message), robust=True)
