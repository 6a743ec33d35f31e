"""The export from the page's options menu and from the API: YAML for every member, with the
user data's credentials for the project's admins only."""

import pytest
import yaml

from instances.services.instances import instance_create
from tests.factories import ImageFactory, instance_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def instance(operator, subnet):
    request = instance_request(subnet, image=ImageFactory(name="demo"), name="web-1")
    return instance_create(project=subnet.project, actor=operator, request=request)


def _secret(text: str) -> dict:
    return next(body for body in yaml.safe_load_all(text) if body["kind"] == "Secret")


def test_the_api_serves_yaml_redacted_below_admin(api_for, instance):
    path = f"/projects/alpha/instances/{instance.pk}/manifest"
    as_admin = api_for("owner").get(path)
    assert as_admin.status_code == 200
    assert as_admin["Content-Type"] == "application/yaml"
    assert instance.initial_password in _secret(as_admin.content.decode())["stringData"]["userdata"]
    as_viewer = api_for("viewer").get(path)
    secret = _secret(as_viewer.content.decode())
    assert instance.initial_password not in as_viewer.content.decode()
    assert secret["metadata"]["annotations"] == {"zopday.io/redacted": "true"}
    assert api_for("outsider").get(path).status_code == 404


def test_the_openapi_document_lists_the_manifest(client):
    schema = client.get("/api/v1/openapi.json").json()
    answer = schema["paths"]["/api/v1/projects/{slug}/instances/{instance_id}/manifest"]["get"]
    assert "application/yaml" in answer["responses"]["200"]["content"]


def test_export_yaml_in_the_options_menu_downloads_the_manifest(client_for, instance):
    client = client_for("viewer")
    page = client.get(f"/projects/alpha/instances/{instance.pk}/").content.decode()
    link = f'href="/projects/alpha/instances/{instance.pk}/manifest.yaml"'
    assert link in page and "Export YAML" in page
    download = client.get(f"/projects/alpha/instances/{instance.pk}/manifest.yaml")
    assert download["Content-Disposition"] == 'attachment; filename="web-1.yaml"'
    kinds = [body["kind"] for body in yaml.safe_load_all(download.content)]
    assert kinds == ["NetworkAttachmentDefinition", "Secret", "VirtualMachine"]
