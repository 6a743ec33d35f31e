"""Bad input is answered 422 with the fields it concerns, never 500."""

import pytest

from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db


def raw_post(api, path, data):
    return api.client.post(
        f"/api/v1{path}", data, content_type="application/json", headers=api.headers
    )


def test_a_body_that_is_not_json_is_a_422_on_the_body(api_for, operator):
    response = raw_post(api_for("operator"), "/projects/alpha/subnets", "{name: 1")
    assert errors_of(response) == {
        "body": [
            "The body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
        ]
    }


def test_a_body_that_is_not_an_object_is_a_422(api_for, operator):
    response = raw_post(api_for("operator"), "/projects/alpha/subnets", "[1, 2]")
    assert errors_of(response) == {"body": ["Send a JSON object of the fields."]}


def test_a_field_the_endpoint_does_not_know_is_refused_not_ignored(api_for, operator):
    body = {"name": "lan", "zone": "local-1a", "cidr_v4": "10.1.0.0/24", "gatway": "10.1.0.1"}
    assert errors_of(api_for("operator").post("/projects/alpha/subnets", body)) == {
        "gatway": ["This field is unknown here: check its name in the API docs."]
    }


def test_a_missing_body_is_a_422_on_the_body(api_for, operator):
    response = raw_post(api_for("operator"), "/projects/alpha/subnets", "")
    assert errors_of(response) == {"body": ["Field required"]}


def test_nul_characters_are_refused_before_they_reach_the_database(api_for, operator):
    body = {"name": "a\x00b", "zone": "local-1a", "cidr_v4": "10.1.0.0/24"}
    assert errors_of(api_for("operator").post("/projects/alpha/subnets", body)) == {
        "name": ["Text cannot contain NUL (0x00) characters."]
    }


def test_lone_surrogates_are_refused(api_for, operator):
    response = raw_post(
        api_for("operator"),
        "/projects/alpha/subnets",
        '{"name": "\\ud800", "zone": "local-1a", "cidr_v4": "10.1.0.0/24"}',
    )
    assert errors_of(response) == {"name": ["Text must be valid Unicode."]}


def test_ids_beyond_any_column_are_schema_errors(api_for, operator):
    response = api_for("operator").get(f"/projects/alpha/instances/{2**64}")
    assert errors_of(response) == {
        "instance_id": ["Input should be less than or equal to 9223372036854775807"]
    }


def test_an_id_that_is_not_a_number_is_a_schema_error(api_for, operator):
    response = api_for("operator").get("/projects/alpha/instances/web-1")
    assert errors_of(response) == {
        "instance_id": ["Input should be a valid integer, unable to parse string as an integer"]
    }


def test_an_unknown_object_is_404_with_the_error_body(api_for, operator):
    response = api_for("operator").get("/projects/alpha/instances/123456")
    assert (response.status_code, response.json()) == (404, {"detail": "Not found.", "errors": {}})


@pytest.mark.parametrize("path", ["/projects/alpha/instancez", "/nothing", "/projects/alpha/"])
def test_a_path_no_endpoint_answers_is_a_json_404(api_for, operator, path):
    response = api_for("operator").get(path)
    assert response.status_code == 404
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json() == {
        "detail": f"No API endpoint at /api/v1{path}: the endpoints are listed at /api/v1/docs.",
        "errors": {},
    }


def test_a_slug_that_cannot_be_a_project_is_a_schema_error(api_for, operator):
    response = api_for("operator").get("/projects/al%20pha")
    assert response.status_code == 422
    assert response.json()["errors"] == {"slug": ["String should match pattern '^[-a-zA-Z0-9_]+$'"]}


def test_an_unknown_query_parameter_is_refused_naming_what_is_accepted(api_for, operator):
    response = api_for("operator").get("/projects/alpha/instances", {"limit": 1})
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "limit": [
            "This query parameter is unknown here: the accepted ones are page, page_size, "
            "search, state, subnet, zone."
        ]
    }


def test_a_query_parameter_on_an_endpoint_that_takes_none_is_refused(api_for, operator):
    response = api_for("operator").get("/projects/alpha/subnets", {"page": 2})
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "page": ["This query parameter is unknown here: this endpoint takes none."]
    }


def test_an_unknown_query_parameter_is_reported_with_the_other_mistakes(api_for, operator):
    response = api_for("operator").get("/projects/alpha/instances", {"limit": 1, "page": 0})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"limit", "page"}


def test_an_unknown_query_parameter_from_an_anonymous_caller_is_401_first(anonymous):
    assert anonymous.get("/projects/alpha/instances", {"limit": 1}).status_code == 401


def test_a_method_a_path_does_not_take_is_a_json_405_with_allow(api_for, operator):
    api = api_for("operator")
    response = api.client.put("/api/v1/projects/alpha/instances", headers=api.headers)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, POST"
    assert response.json() == {
        "detail": "PUT is not allowed on /api/v1/projects/alpha/instances: use GET, POST.",
        "errors": {},
    }
