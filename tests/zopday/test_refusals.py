"""Bodies too large or too deep, through real requests: the API's error body with 413 or 422,
one log line, and never a traceback in the response, in development mode too."""

import json
import logging

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import ImageFactory

pytestmark = pytest.mark.django_db
MB = 1_000_000


@pytest.fixture
def body(subnet):
    return {"name": "web-1", "zone": "local-1a", "root_image": ImageFactory().pk,
            "root_size_gb": 1, "nics": [{"subnet": subnet.pk}], "user_data_mode": "custom"}  # fmt: skip


def post(api, payload: str):
    return api.client.post(
        "/api/v1/projects/alpha/instances", payload, content_type="application/json",
        headers=api.headers,
    )  # fmt: skip


def one_line_logged(caplog) -> None:
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].exc_info is None and "\n" not in records[0].getMessage()


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda body: {**body, "custom_user_data": "#cloud-config\n" + "x" * 20 * MB},
        lambda body: {**body, "padding": ["y" * 1000] * 30_000},
    ],
    ids=["20 MB of user data", "30 MB of JSON"],
)
def test_a_body_over_the_limit_is_413_in_the_error_shape(
    api_for, body, caplog, settings, debug, make
):
    settings.DEBUG = debug
    api = api_for("operator")
    caplog.clear()
    response = post(api, json.dumps(make(body)))
    assert response.status_code == 413
    answer = response.json()
    assert answer["detail"].startswith("The body is larger than the 2.62144 MB the API accepts")
    assert set(answer["errors"]) == {"body"} and "Traceback" not in response.text
    one_line_logged(caplog)


@pytest.mark.parametrize("debug", [False, True])
def test_a_body_nested_ten_thousand_deep_is_422(api_for, body, caplog, settings, debug):
    settings.DEBUG = debug
    api = api_for("operator")
    caplog.clear()
    nested = '{"custom_user_data": ' + "[" * 10_000 + "]" * 10_000 + "}"
    response = post(api, nested)
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "body": ["The body nests too deep to read: a few levels of objects and lists are enough."]
    }
    assert "Traceback" not in response.text
    one_line_logged(caplog)


def test_debugging_is_off_unless_asked_for():
    from zopday import settings as zopday_settings

    assert zopday_settings.DEBUG is False  # the tests run with the development defaults


def test_a_form_over_the_limit_gets_a_page_saying_so(client_for, project, caplog):
    caplog.clear()
    response = client_for("operator").post(
        reverse("instance-new", args=[project.slug]), {"custom_user_data": "x" * 3 * MB}
    )
    assert response.status_code == 413
    assert "larger than the 2.62144 MB the console accepts" in response.text
    assert "Traceback" not in response.text
    one_line_logged(caplog)


def test_an_api_fault_answers_the_error_shape_without_a_traceback(api_for, monkeypatch, settings):
    from instances.api import projects

    def broken(*args, **kwargs):
        raise RuntimeError("a fault")

    monkeypatch.setattr(projects.selectors, "projects_for_user", broken)
    settings.DEBUG = False
    response = api_for("owner").get("/projects")
    assert response.status_code == 500
    assert response.json() == {
        "detail": "The console failed to answer this request; the fault is logged on the server.",
        "errors": {},
    }


def test_anonymous_large_bodies_are_refused_too():
    response = Client().post("/api/v1/projects/alpha/instances", "x" * 3 * MB,
                             content_type="application/json")  # fmt: skip
    assert response.status_code in (401, 413) and "Traceback" not in response.text
