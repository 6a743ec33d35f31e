"""The job page keeps its settings forms true to the job while it polls."""

import re

import pytest

from provisioning.choices import JobStatus
from provisioning.pipeline import job_run_inline
from provisioning.schedules import SCHEDULES, WEEKNIGHTS_AND_WEEKENDS
from provisioning.services.jobs import job_schedule_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def landed(aws, make_job):
    job = job_run_inline(make_job().pk)
    assert job.status == JobStatus.READY, job.message
    return job


def poll_url(html: str) -> str:
    return re.search(r'<section id="progress"[^>]* hx-get="([^"]+)"', html)[1].replace("&amp;", "&")


def test_a_schedule_set_elsewhere_reaches_the_open_job_page_out_of_band(
    client_for, landed, operator
):
    client = client_for("viewer")
    page = client.get(f"/projects/alpha/provisioning/jobs/{landed.pk}/").text
    assert 'id="job-settings"' in page and SCHEDULES[""] in page
    poll = poll_url(page)
    assert client.get(poll).status_code == 204  # nothing changed

    job_schedule_set(job=landed, actor=operator, schedule=WEEKNIGHTS_AND_WEEKENDS, tz="UTC")
    answer = client.get(poll)
    assert answer.status_code == 200
    assert '<div id="job-settings" hx-swap-oob="true">' in answer.text
    assert SCHEDULES[WEEKNIGHTS_AND_WEEKENDS] in answer.text
    # the next poll carries the new settings: the forms are not swapped again
    assert client.get(poll_url(answer.text)).status_code == 204
