"""The transactional outbox: a task's message is a row written in the transaction of the work
that asked for it, published once that commits, and published again by a relay if the broker
was away. A row is deleted only after the broker took its message, so none is lost.

A message may go twice (its sender and the relay, or a crash between publish and delete); the
tasks bear it: each claims its work (a power task acts only under its claim's time, a pipeline
step and a git sync are claimed with a conditional UPDATE, device work applies the row as it is
now, an import acts only in its current attempt).
"""

import contextlib
import fcntl
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from instances.models import OutboxMessage

log = logging.getLogger(__name__)

# A request must answer while the broker is down: one quick reconnect, then the relay's turn.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# A sender publishes its own rows at commit: the relay leaves them that long to it.
RELAY_GRACE = timedelta(seconds=5)
RELAY_EVERY_SECONDS = 2.0
RELAY_BATCH = 500


def _publish(message: OutboxMessage) -> bool:
    """Hand the message to the broker; False when it cannot be reached."""
    eta = message.eta if message.eta is not None and message.eta > timezone.now() else None
    try:
        current_app.send_task(
            message.task,
            args=message.args,
            queue=message.queue,
            eta=eta,
            ignore_result=True,
            retry_policy=PUBLISH_RETRY,
        )
    except Exception as error:  # kombu's, redis' and socket errors alike mean "not now"
        log.warning("the broker is unreachable (%s): %s waits in the outbox", error, message)
        return False
    return True


def outbox_publish(message: OutboxMessage) -> None:
    """Publish a committed message and delete its row; what fails is left to the relay."""
    if not _publish(message):
        return
    try:
        OutboxMessage.objects.filter(pk=message.pk).delete()
    except DatabaseError:  # the relay sends it again, which the task bears
        log.warning("outbox message %s was sent but its row stays", message.pk, exc_info=True)


@contextlib.contextmanager
def _one_relay_at_a_time() -> Iterator[bool]:
    """Where rows cannot be locked (SQLite, one machine), a file lock in the run folder lets one
    relay through at a time, so two workers never publish the same rows together."""
    with open(settings.RUN_DIR / "outbox-relay.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def outbox_relay() -> int:
    """Publish the pending messages their senders could not, oldest first, stopping at the first
    the broker refuses; how many went. Rows another relay holds are skipped where the database
    can lock rows (SQLite would lock every writer out while the broker is slow to answer)."""
    locking = connection.features.has_select_for_update_skip_locked
    if locking:
        with transaction.atomic():
            return _relay(locking=True)
    with _one_relay_at_a_time() as mine:
        return _relay(locking=False) if mine else 0


def _relay(*, locking: bool) -> int:
    cutoff = timezone.now() - RELAY_GRACE
    sent = []
    pending = OutboxMessage.objects.filter(created_at__lt=cutoff).order_by("pk")
    if locking:
        pending = pending.select_for_update(skip_locked=True)
    for message in pending[:RELAY_BATCH]:
        if not _publish(message):
            break
        sent.append(message.pk)
    OutboxMessage.objects.filter(pk__in=sent).delete()
    if sent:
        log.info("the outbox relay published %d pending messages", len(sent))
    return len(sent)


def outbox_relay_start() -> threading.Thread:
    """Run the relay every few seconds on a thread of this process, for as long as it lives.

    Every Celery worker runs one (zopday.celery): a beat task could not, as its own message needs
    the broker that is down, while a worker is up exactly when messages can be delivered."""

    def relay_forever() -> None:
        while True:
            try:
                outbox_relay()
            except Exception:  # the database may be away too: try again next round
                log.exception("the outbox relay failed; it tries again")
            finally:
                close_old_connections()
            time.sleep(RELAY_EVERY_SECONDS)

    thread = threading.Thread(target=relay_forever, name="outbox-relay", daemon=True)
    thread.start()
    return thread
