"""ZopNight stop schedules of Fixed pools: when they call for the VMs, what they do at each edge
(through the power services, as the buttons), what they leave alone, and their bad input."""

import re
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from instances.choices import PowerState
from instances.errors import ActionRefused
from instances.models import AuditEvent, Instance
from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.pipeline import job_run_inline
from provisioning.schedules import WEEKNIGHTS_AND_WEEKENDS, scheduled_on
from provisioning.services.jobs import job_schedule_set
from provisioning.services.schedules import schedules_apply
from tests.provisioning.wizard import url, walk

pytestmark = pytest.mark.django_db

SATURDAY_NOON = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
MONDAY_0830_PARIS = datetime(2026, 12, 7, 7, 30, tzinfo=UTC)  # 08:30 in Paris, 07:30 in UTC


@pytest.mark.parametrize(
    ("when", "tz", "on"),
    [
        (MONDAY_0830_PARIS, "Europe/Paris", True),
        (MONDAY_0830_PARIS, "UTC", False),  # not yet 08:00 there
        (datetime(2026, 12, 4, 18, 59, tzinfo=UTC), "Europe/Paris", True),  # Friday 19:59
        (datetime(2026, 12, 4, 19, 0, tzinfo=UTC), "Europe/Paris", False),  # Friday 20:00
        (SATURDAY_NOON, "Europe/Paris", False),
        (datetime(2026, 12, 7, 14, 0, tzinfo=UTC), "America/New_York", True),  # Monday 09:00
    ],
)
def test_the_schedule_runs_the_vms_on_weekdays_from_eight_to_eight(when, tz, on):
    assert scheduled_on(WEEKNIGHTS_AND_WEEKENDS, tz, when) is on
    assert scheduled_on("", tz, when) is True  # no schedule: 24×7


@pytest.fixture
def landed(aws, make_job):
    job = job_run_inline(make_job(instance_count=2).pk)
    assert job.status == JobStatus.READY, job.message
    return job


def instances_of(job):
    ids = [vm.console_instance_id for vm in InfraConfig.from_json(job.config).vms]
    return Instance.objects.filter(pk__in=ids).order_by("name")


def test_the_schedule_shuts_the_pool_down_at_its_edge_and_leaves_what_is_changed_by_hand(
    landed, operator, django_capture_on_commit_callbacks
):
    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS,
                     tz="Europe/Paris")  # fmt: skip
    with django_capture_on_commit_callbacks() as sent:
        assert schedules_apply(SATURDAY_NOON) == [landed.pk]
    assert len(sent) == 2  # one power task each, on the cloud queue
    assert [i.power_state for i in instances_of(landed)] == [PowerState.STOPPING] * 2
    event = AuditEvent.objects.filter(action="provisioning.schedule").latest("pk")
    assert event.message == "ZopNight schedule: shut down web-1, web-2" and event.actor is None
    landed.refresh_from_db()
    assert InfraConfig.from_json(landed.config).schedule_applied == "off"

    # stopped, then someone starts web-2 by hand on Saturday: the schedule leaves it running
    instances_of(landed).update(power_state=PowerState.STOPPED)
    Instance.objects.filter(name="web-2").update(power_state=PowerState.RUNNING)
    assert schedules_apply(SATURDAY_NOON) == []
    assert Instance.objects.get(name="web-2").power_state == PowerState.RUNNING

    # Monday 08:30 in Paris: the stopped one starts, the running one is left alone
    with django_capture_on_commit_callbacks() as sent:
        assert schedules_apply(MONDAY_0830_PARIS) == [landed.pk]
    assert len(sent) == 1
    assert [i.power_state for i in instances_of(landed)] == [
        PowerState.STARTING,
        PowerState.RUNNING,
    ]
    event = AuditEvent.objects.filter(action="provisioning.schedule").latest("pk")
    assert event.message == "ZopNight schedule: started web-1"


def test_a_removed_schedule_leaves_the_vms_as_they_are(landed, operator):
    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS, tz="UTC")
    job_schedule_set(job=landed, actor=operator, schedule="")
    assert schedules_apply(SATURDAY_NOON) == []
    assert [i.power_state for i in instances_of(landed)] == [PowerState.RUNNING] * 2


def test_schedules_are_for_ready_fixed_pools_and_operators_with_a_time_zone(
    aws, make_job, landed, operator, viewer
):
    with pytest.raises(ValidationError) as error:
        job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS,
                         tz="Mars/Olympus")  # fmt: skip
    assert error.value.message_dict == {
        "schedule_tz": ["'Mars/Olympus' is not a time zone: give one such as Europe/Paris or UTC."]
    }
    with pytest.raises(ValidationError, match="Unknown schedule 'nightly'"):
        job_schedule_set(job=landed, actor=operator, schedule="nightly")
    with pytest.raises(ActionRefused, match="Needs the operator role"):
        job_schedule_set(job=landed, actor=viewer, schedule=WEEKNIGHTS_AND_WEEKENDS)
    asg = job_run_inline(make_job("pool", pool_mode="ASG", asg_min=1, asg_max=2).pk)
    with pytest.raises(ActionRefused, match="A stop schedule is for a Fixed pool"):
        job_schedule_set(job=asg, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS)
    landed.refresh_from_db()
    assert InfraConfig.from_json(landed.config).schedule == ""  # nothing was half-set


def test_the_api_sets_a_schedule_one_change_at_a_time(api_for, landed):
    url = f"/provisioning-jobs/{landed.pk}"
    api = api_for("operator")
    mixed = api.patch(url, {"schedule": WEEKNIGHTS_AND_WEEKENDS, "vmOp": "attach_lb"})
    assert mixed.status_code == 422
    assert "one change at a time" in mixed.json()["errors"]["schedule"][0]
    bad = api.patch(url, {"schedule": WEEKNIGHTS_AND_WEEKENDS, "schedule_tz": "Nowhere"})
    assert bad.status_code == 422 and "is not a time zone" in bad.json()["errors"]["schedule_tz"][0]
    done = api.patch(url, {"schedule": WEEKNIGHTS_AND_WEEKENDS, "schedule_tz": "Asia/Tokyo"})
    assert done.status_code == 202, done.content
    config = done.json()["config"]
    assert (config["schedule"], config["schedule_tz"]) == (WEEKNIGHTS_AND_WEEKENDS, "Asia/Tokyo")
    assert done.json()["allowed_actions"]["schedule"] is True


def test_the_job_page_sets_the_schedule_and_says_what_is_wrong_at_the_field(
    client_for, landed, project
):
    url = f"/projects/{project.slug}/provisioning/jobs/{landed.pk}/"
    page = client_for("operator").get(url).text
    assert "ZopNight stop schedule" in page and ">Set schedule</button>" in page
    assert ">Set schedule</button>" not in client_for("viewer").get(url).text
    action = f"{url}schedule/"
    wrong = (
        client_for("operator")
        .post(action, {"schedule": WEEKNIGHTS_AND_WEEKENDS, "schedule_tz": "Nowhere"})
        .text
    )
    assert 'id="schedule_tz-error">&#x27;Nowhere&#x27; is not a time zone' in wrong
    assert 'value="Nowhere"' in wrong
    done = (
        client_for("operator")
        .post(
            action,
            {"schedule": WEEKNIGHTS_AND_WEEKENDS, "schedule_tz": "Europe/Paris"},
            follow=True,
        )
        .text
    )
    assert "Stopped on weeknights and weekends" in done and "(Europe/Paris)" in done


def test_the_wizard_attaches_the_schedule_to_a_fixed_pool_and_checks_its_time_zone(
    client_for, account
):
    client = client_for("operator")
    walk(client, account)
    review = client.get(url("review")).text
    assert 'name="schedule" value="weeknights-weekends"' in review
    wrong = client.post(url("review"), {"action": "create", "schedule": WEEKNIGHTS_AND_WEEKENDS,
                                         "schedule_tz": "Nowhere"}).text  # fmt: skip
    assert 'id="schedule_tz-error">&#x27;Nowhere&#x27; is not a time zone' in wrong
    assert 'aria-invalid="true" aria-describedby="schedule_tz-error"' in wrong
    assert 'value="Nowhere"' in wrong and not ProvisioningJob.objects.exists()
    created = client.post(url("review"), {"action": "create", "schedule": WEEKNIGHTS_AND_WEEKENDS,
                                           "schedule_tz": "Europe/Paris"})  # fmt: skip
    assert created.status_code == 302
    config = InfraConfig.from_json(ProvisioningJob.objects.get().config)
    assert (config.schedule, config.schedule_tz) == (WEEKNIGHTS_AND_WEEKENDS, "Europe/Paris")


def test_an_asg_pool_asked_for_with_a_schedule_is_refused_at_the_field(api_for, account):
    body = {"project": "alpha", "account": account.pk, "name": "pool", "pool_mode": "ASG",
            "asg_max": 2, "schedule": WEEKNIGHTS_AND_WEEKENDS}  # fmt: skip
    response = api_for("operator").post("/provisioning-jobs", body)
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "schedule": ["A stop schedule is for a Fixed pool: an ASG pool sets its own size."]
    }
    assert not ProvisioningJob.objects.exists()


def test_a_vm_between_two_states_at_an_edge_is_asked_again_at_the_next_pass(
    landed, operator, django_capture_on_commit_callbacks
):
    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS, tz="UTC")
    Instance.objects.filter(name="web-2").update(power_state=PowerState.STARTING)
    with django_capture_on_commit_callbacks() as sent:
        assert schedules_apply(SATURDAY_NOON) == [landed.pk]
    assert len(sent) == 1  # web-1 only
    event = AuditEvent.objects.filter(action="provisioning.schedule").latest("pk")
    assert event.message == (
        "ZopNight schedule: shut down web-1; web-2 between two states, asked again in a minute"
    )
    landed.refresh_from_db()
    assert InfraConfig.from_json(landed.config).schedule_applied == ""  # the edge is not done
    Instance.objects.filter(name="web-2").update(power_state=PowerState.RUNNING)
    with django_capture_on_commit_callbacks() as sent:
        assert schedules_apply(SATURDAY_NOON) == [landed.pk]
    assert len(sent) == 1 and Instance.objects.get(name="web-2").power_state == "stopping"
    landed.refresh_from_db()
    assert InfraConfig.from_json(landed.config).schedule_applied == "off"


def test_saving_the_schedule_again_or_its_time_zone_alone_does_not_fire_it_again(
    landed, operator, api_for
):
    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS,
                     tz="Europe/Paris")  # fmt: skip
    schedules_apply(SATURDAY_NOON)
    instances_of(landed).update(power_state=PowerState.RUNNING)  # started by hand for the evening
    api = api_for("operator")
    url = f"/provisioning-jobs/{landed.pk}"
    assert api.patch(url, {"schedule": WEEKNIGHTS_AND_WEEKENDS}).status_code == 202
    assert api.patch(url, {"schedule_tz": "Europe/Berlin"}).status_code == 202
    landed.refresh_from_db()
    config = InfraConfig.from_json(landed.config)
    assert (config.schedule_tz, config.schedule_applied) == ("Europe/Berlin", "off")
    assert schedules_apply(SATURDAY_NOON) == []
    assert [i.power_state for i in instances_of(landed)] == [PowerState.RUNNING] * 2


def test_a_viewer_posting_a_schedule_is_forbidden_whatever_it_says(client_for, landed, project):
    action = f"/projects/{project.slug}/provisioning/jobs/{landed.pk}/schedule/"
    response = client_for("viewer").post(action, {"schedule": "x", "schedule_tz": "Nowhere"})
    assert response.status_code == 403


def test_no_load_balancer_is_attached_while_the_schedule_has_the_vms_stopped(landed, operator):
    from provisioning.services.jobs import job_vm_op

    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS, tz="UTC")
    schedules_apply(SATURDAY_NOON)
    with pytest.raises(ActionRefused, match="The stop schedule has the VMs stopped"):
        job_vm_op(job=landed, actor=operator, op="attach_lb")


def test_a_job_with_an_empty_time_zone_shows_and_keeps_utc(client_for, landed, project):
    config = InfraConfig.from_json(landed.config)
    config.schedule, config.schedule_tz = WEEKNIGHTS_AND_WEEKENDS, ""
    ProvisioningJob.objects.filter(pk=landed.pk).update(config=config.to_json())
    page = client_for("operator").get(f"/projects/{project.slug}/provisioning/jobs/{landed.pk}/")
    assert "(UTC)" in page.text and "()" not in page.text
    assert re.search(r'name="schedule_tz" value="UTC"', page.text)
    assert scheduled_on(WEEKNIGHTS_AND_WEEKENDS, "", SATURDAY_NOON) is False


def test_removing_the_schedule_needs_no_time_zone(client_for, landed, project):
    action = f"/projects/{project.slug}/provisioning/jobs/{landed.pk}/schedule/"
    done = client_for("operator").post(action, {"schedule": "", "schedule_tz": ""}, follow=True)
    assert "This field is required" not in done.text and "None: the VMs run 24×7" in done.text
    assert InfraConfig.from_json(ProvisioningJob.objects.get(pk=landed.pk).config).schedule == ""
