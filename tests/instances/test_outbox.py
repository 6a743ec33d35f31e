"""The outbox: what a request commits and what the queue carries agree while Redis is killed,
and a relay publishes what the broker missed once it is back.

Each test runs a redis-server of its own (the command bin/zop starts) and kills it with -9.
"""

import shutil
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from instances.backends import backend_named
from instances.choices import Outcome, PowerState
from instances.models import AuditEvent, Disk, Instance, OutboxMessage
from instances.services import outbox, power
from instances.services.queueing import send_on_commit
from tests import factories
from tests.broker import BrokerQueue
from tests.redis_server import RedisServer, celery_app_on
from tests.services import start_celery_worker_on, stop

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SETTLE_TIMEOUT = 90  # the broker back, the relay's round, a worker's reconnect, a boot under TCG


@pytest.fixture
def broker():
    """A private Redis the test process's Celery app uses; removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="zr", dir="/tmp"))  # a unix socket's path is short
    server = RedisServer(folder)
    server.start()
    with celery_app_on(server.url):
        yield server
    server.kill()
    shutil.rmtree(folder)


def wait_for(predicate, what: str, timeout: float = SETTLE_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def pending() -> list[tuple[str, list]]:
    return list(OutboxMessage.objects.order_by("pk").values_list("task", "args"))


def test_a_message_is_written_with_its_work_and_gone_once_the_broker_has_it(broker):
    queue = BrokerQueue(f"test-{uuid.uuid4().hex[:8]}")
    with pytest.raises(RuntimeError), transaction.atomic():
        send_on_commit("zopday.ping", 1, queue=queue.name)
        raise RuntimeError("the work failed")
    assert pending() == []  # rolled back with the work
    with transaction.atomic():
        send_on_commit("zopday.ping", 2, queue=queue.name, countdown=30)
        assert pending() == [("zopday.ping", [2])]
    assert pending() == []
    [sent] = queue.sent()
    assert (sent.task, sent.args) == ("zopday.ping", (2,))
    assert sent.eta is not None and sent.eta > timezone.now() + timedelta(seconds=20)


def test_the_relay_keeps_what_the_broker_missed_until_it_is_back(broker):
    queue = BrokerQueue(f"test-{uuid.uuid4().hex[:8]}")
    broker.kill()
    send_on_commit("zopday.ping", 3, queue=queue.name)  # outside a transaction: at once
    assert pending() == [("zopday.ping", [3])]
    OutboxMessage.objects.update(created_at=timezone.now() - outbox.RELAY_GRACE)
    assert outbox.outbox_relay() == 0
    assert pending() == [("zopday.ping", [3])]

    broker.start()
    assert outbox.outbox_relay() == 1
    assert pending() == []
    assert [(sent.task, sent.args) for sent in queue.sent()] == [("zopday.ping", (3,))]


def test_where_rows_cannot_be_locked_one_relay_publishes_at_a_time(broker, settings, tmp_path):
    settings.RUN_DIR = tmp_path
    with outbox._one_relay_at_a_time() as first, outbox._one_relay_at_a_time() as second:
        assert (first, second) == (True, False)
    with outbox._one_relay_at_a_time() as again:
        assert again


@pytest.fixture
def host_worker(broker, machines_root, tmp_path):
    """A real worker on a host of its own, on the private Redis."""
    host = f"ob-{uuid.uuid4().hex[:8]}"
    env = {"ZOPDAY_HOST": host, "REDIS_URL": broker.url, "ZOPDAY_OUTBOX_RELAY": "true"}
    process = start_celery_worker_on(tmp_path / "worker.log", f"host.{host}", env)
    yield host
    stop(process)


@pytest.fixture
def vm(host_worker, operator, project):
    lan = factories.SubnetFactory(
        project=project, name="lan", cidr_v4="10.88.0.0/24", gateway="10.88.0.1", dns_resolvers=""
    )
    instance = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan, name="ob-1", ip="10.88.0.10"
    )
    Instance.objects.filter(pk=instance.pk).update(host=host_worker)
    Disk.objects.filter(instance=instance).update(host=host_worker)
    instance.refresh_from_db()
    yield instance
    instance.refresh_from_db()
    if instance.machine_id and backend_named("qemu").status(instance.machine_id).pid:
        backend_named("qemu").force_stop(instance.machine_id)


def test_a_start_asked_while_redis_is_dead_answers_and_runs_once_redis_is_back(
    broker, vm, operator
):
    broker.kill()
    client = Client()
    client.force_login(operator)
    url = reverse(
        "instance-power", kwargs={"project_slug": vm.project.slug, "pk": vm.pk, "action": "start"}
    )

    response = client.post(url)

    assert response.status_code == 302  # what really happened: the start is claimed
    vm.refresh_from_db()
    assert vm.power_state == PowerState.STARTING
    event = AuditEvent.objects.get(action="instance.start")
    assert (event.actor_name, event.outcome) == ("operator", Outcome.SUCCESS)
    assert [task for task, _ in pending()] == ["instances.machine_start"]

    broker.start()  # the worker's relay publishes the start, its worker carries it out

    def running() -> bool:
        vm.refresh_from_db()
        return vm.power_state == PowerState.RUNNING

    wait_for(running, f"{vm.name} to run (it is {vm.power_state}: {vm.power_message})")
    assert pending() == []
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for(lambda: Instance.objects.get(pk=vm.pk).power_state == PowerState.STOPPED, "a stop")
