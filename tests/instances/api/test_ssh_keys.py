"""The SSH key catalog through the API."""

import pytest

from instances.models import SSHKey
from tests.instances.api.helpers import errors_of, public_key

pytestmark = pytest.mark.django_db


def test_an_operator_adds_a_key_and_gets_its_fingerprint(api_for, operator):
    response = api_for("operator").post(
        "/projects/alpha/ssh-keys", {"name": "laptop", "public_key": public_key()}
    )
    assert response.status_code == 201
    assert response.json()["fingerprint"].startswith("SHA256:")


def test_a_private_key_is_refused_with_the_services_message(api_for, operator):
    body = {"name": "oops", "public_key": "-----BEGIN OPENSSH PRIVATE KEY----- abc"}
    assert errors_of(api_for("operator").post("/projects/alpha/ssh-keys", body)) == {
        "public_key": [
            "This is a private key. Paste the public key (the .pub file) instead; never share the private one."
        ]
    }


def test_a_key_of_an_unknown_type_is_refused_not_a_server_error(api_for, operator):
    body = {"name": "odd", "public_key": "ssh-unknown AAAAC3NzaC1lZDI1NTE5 me@host"}
    assert errors_of(api_for("operator").post("/projects/alpha/ssh-keys", body)) == {
        "public_key": [
            "This is not a valid OpenSSH public key. It should look like 'ssh-ed25519 AAAAC3Nza... user@host'."
        ]
    }


def test_the_same_key_twice_is_refused(api_for, operator):
    api, key = api_for("operator"), public_key()
    api.post("/projects/alpha/ssh-keys", {"name": "one", "public_key": key})
    errors = errors_of(api.post("/projects/alpha/ssh-keys", {"name": "two", "public_key": key}))
    assert errors["public_key"] == ["This key is already in the project's catalog."]


def test_keys_are_listed_read_and_removed(api_for, operator, viewer):
    created = (
        api_for("operator")
        .post("/projects/alpha/ssh-keys", {"name": "laptop", "public_key": public_key()})
        .json()
    )
    viewer_api = api_for("viewer")
    assert [k["name"] for k in viewer_api.get("/projects/alpha/ssh-keys").json()] == ["laptop"]
    assert viewer_api.get(f"/projects/alpha/ssh-keys/{created['id']}").json()["name"] == "laptop"
    assert viewer_api.delete(f"/projects/alpha/ssh-keys/{created['id']}").status_code == 403
    assert (
        api_for("operator").delete(f"/projects/alpha/ssh-keys/{created['id']}").status_code == 204
    )
    assert not SSHKey.objects.exists()


def test_a_viewer_cannot_add_a_key(api_for, viewer):
    response = api_for("viewer").post(
        "/projects/alpha/ssh-keys", {"name": "laptop", "public_key": public_key()}
    )
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )


def test_an_outsider_gets_404_for_the_key_catalog(api_for, outsider, project):
    assert api_for("outsider").get("/projects/alpha/ssh-keys").status_code == 404
