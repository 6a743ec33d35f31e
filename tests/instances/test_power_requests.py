"""Power requests: who may ask, in which state, and that a request is claimed only once."""

import pytest

from instances.actions import instance_allowed_actions
from instances.choices import Outcome, PowerState, Role, RunStrategy
from instances.errors import ActionRefused
from instances.models import AuditEvent, Instance
from instances.services import power
from instances.services.instances import instance_create, instance_delete, instance_set_run_strategy
from tests.broker import BrokerQueue
from tests.factories import instance_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def instance(project, operator, subnet):
    return instance_create(project=project, actor=operator, request=instance_request(subnet))


def set_state(instance, state):
    instance.power_state = state
    instance.save(update_fields=["power_state"])


def test_an_operator_starts_a_stopped_instance_once_on_its_host(
    instance, operator, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        power.instance_start(instance=instance, actor=operator)
        with pytest.raises(ActionRefused, match="The instance is starting."):
            power.instance_start(instance=instance, actor=operator)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STARTING
    # one task, on the host's queue, with the claim's time as the database holds it
    assert [(sent.task, sent.args) for sent in queue.sent()] == [
        ("instances.machine_start", (instance.pk, instance.state_changed_at.isoformat()))
    ]


def test_a_viewer_cannot_power_on_and_the_refusal_is_audited(instance, viewer):
    with pytest.raises(ActionRefused, match="Needs the operator role."):
        power.instance_start(instance=instance, actor=viewer)
    event = AuditEvent.objects.get(action="instance.start")
    assert (event.actor_name, event.outcome) == ("viewer", Outcome.DENIED)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED


def test_halted_refuses_start_until_the_strategy_changes(instance, operator):
    instance_set_run_strategy(instance=instance, actor=operator, strategy=RunStrategy.HALTED)
    with pytest.raises(
        ActionRefused, match="The run strategy is Halted: change it before starting."
    ):
        power.instance_start(instance=instance, actor=operator)
    instance_set_run_strategy(instance=instance, actor=operator, strategy=RunStrategy.MANUAL)
    power.instance_start(instance=instance, actor=operator)


def test_switching_to_always_starts_a_stopped_instance(instance, operator):
    instance_set_run_strategy(instance=instance, actor=operator, strategy=RunStrategy.ALWAYS)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STARTING


def test_switching_a_running_instance_to_halted_shuts_it_down(instance, operator):
    set_state(instance, PowerState.RUNNING)
    instance_set_run_strategy(instance=instance, actor=operator, strategy=RunStrategy.HALTED)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPING


def test_an_unknown_strategy_lists_the_valid_ones(instance, operator):
    from django.core.exceptions import ValidationError

    with pytest.raises(
        ValidationError, match="Choose one of: Always, Manual, RerunOnFailure, Once, Halted."
    ):
        instance_set_run_strategy(instance=instance, actor=operator, strategy="Sometimes")


@pytest.mark.parametrize(
    ("state", "allowed"),
    [
        (PowerState.STOPPED, {"start", "configure", "detach_disk", "revert_disk"}),
        (PowerState.STARTING, {"force_stop"}),
        (PowerState.RUNNING, {"shutdown", "force_stop", "restart", "configure"}),
        (PowerState.STOPPING, {"force_stop"}),
        (PowerState.RESTARTING, {"force_stop"}),
        (PowerState.FAILED, {"start", "configure", "detach_disk", "revert_disk"}),
    ],
)
def test_allowed_actions_for_an_operator_follow_the_power_state(instance, state, allowed):
    set_state(instance, state)
    actions = instance_allowed_actions(instance, Role.OPERATOR)
    assert {name for name, verdict in actions.items() if verdict} == allowed


def test_admins_may_also_delete_and_read_the_password(instance):
    actions = instance_allowed_actions(instance, Role.ADMIN)
    assert actions["delete"] and actions["view_password"]
    viewer_actions = instance_allowed_actions(instance, Role.VIEWER)
    assert not any(viewer_actions.values())
    assert viewer_actions["start"].reason == "Needs the operator role."


def test_detaching_says_why_it_needs_a_stopped_instance(instance):
    set_state(instance, PowerState.RUNNING)
    reason = instance_allowed_actions(instance, Role.OPERATOR)["detach_disk"].reason
    assert reason.startswith("Stop the instance before detaching a persistent disk")


def test_each_power_request_claims_its_transition(instance, operator):
    set_state(instance, PowerState.RUNNING)
    power.instance_restart(instance=instance, actor=operator)
    assert instance.power_state == PowerState.RESTARTING
    power.instance_force_stop(instance=instance, actor=operator)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPING
    with pytest.raises(ActionRefused, match="^The instance is stopping.$"):
        power.instance_shutdown(instance=instance, actor=operator)


def test_a_running_instance_cannot_be_deleted(instance, owner):
    set_state(instance, PowerState.RUNNING)
    with pytest.raises(ActionRefused, match="Stop the instance before deleting it."):
        instance_delete(instance=instance, actor=owner)


def test_deleting_frees_addresses_and_keeps_secondary_disks(project, owner, operator, subnet):
    from instances.models import Disk, IPLease
    from instances.services.instances import DiskRequest

    instance = instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, disks=[DiskRequest(size_gb=2)]),
    )
    instance_delete(instance=instance, actor=owner)
    assert not IPLease.objects.exists()
    assert list(Disk.objects.values_list("name", "instance")) == [("web-1-disk1", None)]


def test_deleting_removes_the_machine_and_its_root_disk_file_on_its_host(
    instance, owner, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    machine_id, root = instance.machine_id, instance.disks.get().device_name
    with django_capture_on_commit_callbacks(execute=True):
        instance_delete(instance=instance, actor=owner)
    assert [(sent.task, sent.args) for sent in queue.sent()] == [
        ("instances.machine_undefine", ("qemu", machine_id, [root]))
    ]


def test_power_buttons_of_backends_the_console_lacks_say_they_are_not_available_yet(
    instance, operator
):
    instance.backend = "proxmox"
    actions = instance_allowed_actions(instance, Role.OPERATOR)
    assert actions["start"].reason == (
        "Power operations on proxmox instances are not available yet."
    )
    with pytest.raises(ActionRefused, match="not available yet"):
        power.instance_start(instance=instance, actor=operator)


def test_aws_instances_power_on_through_the_shared_queue_not_a_host_queue(
    instance, operator, settings, django_capture_on_commit_callbacks
):
    from instances.services.queueing import host_queue

    assert host_queue(instance) == f"host.{instance.host}"
    Instance.objects.filter(pk=instance.pk).update(backend="aws", host="aws:us-east-1")
    instance.refresh_from_db()
    assert host_queue(instance) == settings.ZOPDAY_CLOUD_QUEUE == "celery"
    assert instance_allowed_actions(instance, Role.OPERATOR)["start"]
    settings.ZOPDAY_CLOUD_QUEUE = "test-cloud"  # a queue no worker of this test run reads
    queue = BrokerQueue("test-cloud")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            power.instance_start(instance=instance, actor=operator)
        assert [sent.task for sent in queue.sent()] == ["instances.machine_start"]
    finally:
        queue.forget()
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STARTING
