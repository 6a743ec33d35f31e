"""Export buttons on the pages of every kind: each links to the object's YAML, which any member
downloads by GET without changing anything; outsiders get 404 and the user data's credentials
reach the project's admins only."""

import html
import re

import pytest
import yaml

from instances.manifests import manifest_apply
from instances.models import AuditEvent, ManagedObject
from instances.services.network import eip_allocate
from tests.factories import ImageFactory
from tests.instances.manifests.test_kinds import EVERYTHING

pytestmark = pytest.mark.django_db

SECRET = "hunter2-very-secret"
WITH_USER_DATA = EVERYTHING.replace(
    "  root_size_gb: 2\n",
    f"  root_size_gb: 2\n  user_data_mode: custom\n  custom_user_data: |\n"
    f"    #cloud-config\n    password: {SECRET}\n",
)


@pytest.fixture
def objects(owner, project, image):
    ImageFactory(name="mine", project=project)
    manifest_apply(sources=[("m.yaml", WITH_USER_DATA)], actor=owner)
    return project


def export_links(page: str) -> list[str]:
    return re.findall(r'href="([^"]+)" download data-action="export-manifest"', page)


def downloaded(client, link: str) -> dict:
    answer = client.get(link)
    assert answer.status_code == 200, link
    assert answer["Content-Disposition"].startswith("attachment; filename=")
    [document] = yaml.safe_load_all(answer.content)
    return document


@pytest.mark.parametrize(
    ("page", "kind", "name"),
    [
        ("/projects/alpha/ssh-keys/", "SSHKey", "me"),
        ("/projects/alpha/images/", "Image", "mine"),
        ("/projects/alpha/", "Disk", "spare"),
        ("/projects/alpha/", "ElasticIP", "web-1-public"),
        ("/projects/alpha/instances/{pk}/?tab=networking", "ElasticIP", "web-1-public"),
    ],
)
def test_each_kinds_page_has_an_export_button_every_member_may_use(
    client_for, objects, page, kind, name
):
    pk = objects.instances.get().pk
    events, managed = AuditEvent.objects.count(), ManagedObject.objects.count()
    for role in ("viewer", "operator", "owner"):
        client = client_for(role)
        link = f"/projects/alpha/manifest/{kind}/{name}.yaml"
        assert link in export_links(client.get(page.format(pk=pk)).content.decode())
        document = downloaded(client, link)
        assert (document["kind"], document["project"], document["name"]) == (kind, "alpha", name)
        assert client_for("outsider").get(link).status_code == 404
    assert (AuditEvent.objects.count(), ManagedObject.objects.count()) == (events, managed)


def test_a_shared_image_has_no_export_button(client_for, objects):
    page = client_for("owner").get("/projects/alpha/images/").content.decode()
    assert export_links(page) == ["/projects/alpha/manifest/Image/mine.yaml"]  # not demo


def test_the_buttons_answer_get_only(client_for, objects):
    answer = client_for("owner").post("/projects/alpha/manifest/SSHKey/me.yaml")
    assert answer.status_code == 405


def test_user_data_credentials_reach_the_projects_admins_only(client_for, objects):
    pk = objects.instances.get().pk
    link = "/projects/alpha/manifest/Instance/web-1.yaml"
    assert link in export_links(client_for("viewer").get(f"/projects/alpha/instances/{pk}/").text)
    for role, shown in (("viewer", False), ("operator", False), ("owner", True)):
        one = client_for(role).get(link).content.decode()
        every = client_for(role).get("/projects/alpha/manifest.yaml").content.decode()
        assert (SECRET in one, SECRET in every) == (shown, shown), role
        assert "#cloud-config" in one and "#cloud-config" in every


def test_an_elastic_ip_made_in_the_console_is_exported_by_its_address(client_for, project, owner):
    eip = eip_allocate(project=project, actor=owner)
    link = f"/projects/alpha/manifest/ElasticIP/{eip.address}.yaml"
    assert link in export_links(client_for("viewer").get("/projects/alpha/").text)
    assert downloaded(client_for("viewer"), link)["spec"] == {"nic": None}


@pytest.mark.parametrize(
    ("page", "kind", "name"),
    [
        ("/projects/alpha/ssh-keys/", "SSHKey", "ops/laptop"),
        ("/projects/alpha/images/", "Image", "ubuntu/24.04"),
        ("/projects/alpha/", "Disk", "data/../spare%2F1"),
        ("/projects/alpha/", "Disk", "line\nbreak"),
    ],
)
def test_a_name_stored_with_a_slash_before_names_were_checked_still_renders_and_exports(
    client_for, project, page, kind, name
):
    from instances.models import Disk, SSHKey
    from tests.instances.manifests.test_kinds import KEY

    rows = {
        "SSHKey": lambda: SSHKey.objects.create(project=project, name=name, public_key=KEY),
        "Image": lambda: ImageFactory(name=name, project=project),
        "Disk": lambda: Disk.objects.create(project=project, name=name, zone="local-1a"),
    }
    rows[kind]()  # as an older console stored it, unchecked
    for role in ("viewer", "owner"):
        answer = client_for(role).get(page)
        assert answer.status_code == 200
        [link] = [link for link in export_links(answer.content.decode()) if "/manifest/" in link]
        document = downloaded(client_for(role), html.unescape(link))
        assert (document["kind"], document["name"]) == (kind, name)
