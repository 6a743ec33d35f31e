"""What the code under test sent to the real broker, read back from Redis.

A test moves its instance to a host of its own: that host's queue has no worker, so the messages
stay there for the test to read, with the queue, arguments and ETA Celery gave them.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime

from instances.models import Instance


@dataclass(frozen=True)
class Sent:
    task: str
    args: tuple
    eta: datetime | None


class BrokerQueue:
    def __init__(self, name: str) -> None:
        self.name = name

    def sent(self) -> list[Sent]:
        """The messages on the queue, oldest first; reading takes them off."""
        from zopday.celery import app

        messages = []
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            while (message := channel.basic_get(self.name, no_ack=True)) is not None:
                args, _kwargs, _embed = message.decode()  # Celery's message protocol 2
                eta = message.headers.get("eta")
                messages.append(
                    Sent(message.headers["task"], tuple(args), eta and datetime.fromisoformat(eta))
                )
        return messages

    def forget(self) -> None:
        """Remove the queue and what kombu recorded of it."""
        from zopday.celery import app

        with app.connection_for_write() as connection:
            client = connection.default_channel.client
            client.delete(
                self.name, f"_kombu.binding.{self.name}", f"_kombu.binding_permanent.{self.name}"
            )


def own_host_queue(instance: Instance) -> BrokerQueue:
    """Put the instance on a host of its own; its host tasks then wait in the returned queue."""
    instance.host = f"test-{uuid.uuid4().hex[:12]}"
    Instance.objects.filter(pk=instance.pk).update(host=instance.host)
    return BrokerQueue(f"host.{instance.host}")
