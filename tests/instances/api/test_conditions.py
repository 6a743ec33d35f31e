"""ETags on the objects the API answers, and If-Match keeping concurrent writers honest."""

import threading

import pytest
from django.conf import settings
from django.db import connection

from instances.api import instances as instances_api
from instances.choices import RunStrategy
from instances.models import Instance, SSHKey
from instances.services.keys import ssh_key_add
from instances.services.network import eip_allocate
from instances.services.storage import disk_create
from tests.instances.api.helpers import public_key

pytestmark = pytest.mark.django_db


def send(api, method, path, body=None, **headers):
    return getattr(api.client, method)(
        f"/api/v1{path}", body or {}, content_type="application/json",
        headers={**api.headers, **headers},
    )  # fmt: skip


@pytest.fixture
def path(instance):
    return f"/projects/alpha/instances/{instance.pk}"


def test_an_object_read_singly_carries_a_strong_etag(api_for, operator, path):
    response = api_for("operator").get(path)
    tag = response.headers["ETag"]
    assert tag.startswith('"') and not tag.startswith("W/")
    assert api_for("operator").get(path).headers["ETag"] == tag


def test_lists_carry_no_etag(api_for, operator, instance):
    assert "ETag" not in api_for("operator").get("/projects/alpha/instances").headers


def test_a_stale_if_match_gets_412_and_changes_nothing(api_for, operator, instance, path):
    api = api_for("operator")
    tag = api.get(path).headers["ETag"]
    Instance.objects.filter(pk=instance.pk).update(vcpus=4)  # another writer's change
    response = send(api, "patch", path, {"run_strategy": "Halted"}, if_match=tag)
    assert response.status_code == 412
    assert response.json()["errors"]["If-Match"][0].startswith("If-Match does not hold")
    assert response.headers["ETag"] == api.get(path).headers["ETag"] != tag
    instance.refresh_from_db()
    assert instance.run_strategy == RunStrategy.MANUAL


def test_a_bogus_if_match_gets_412(api_for, operator, instance, path):
    response = send(
        api_for("operator"), "patch", path, {"run_strategy": "Halted"}, if_match="bogus"
    )
    assert response.status_code == 412
    assert set(response.json()) == {"detail", "errors"}
    instance.refresh_from_db()
    assert instance.run_strategy == RunStrategy.MANUAL


@pytest.mark.parametrize("if_match", ["current", "*", 'W/"x", current'])
def test_a_matching_if_match_or_a_star_lets_the_change_through(
    api_for, operator, instance, path, if_match
):
    api = api_for("operator")
    tag = api.get(path).headers["ETag"]
    header = if_match.replace("current", tag)
    response = send(api, "patch", path, {"run_strategy": "Halted"}, if_match=header)
    assert response.status_code == 200
    instance.refresh_from_db()
    assert instance.run_strategy == RunStrategy.HALTED
    assert response.headers["ETag"] == api.get(path).headers["ETag"] != tag


def test_a_stale_if_match_keeps_a_delete_from_happening(api_for, owner, project, operator):
    key = ssh_key_add(project=project, actor=operator, name="laptop", public_key=public_key())
    api = api_for("owner")
    response = send(api, "delete", f"/projects/alpha/ssh-keys/{key.pk}", if_match='"stale"')
    assert response.status_code == 412
    assert SSHKey.objects.filter(pk=key.pk).exists()
    tag = api.get(f"/projects/alpha/ssh-keys/{key.pk}").headers["ETag"]
    response = send(api, "delete", f"/projects/alpha/ssh-keys/{key.pk}", if_match=tag)
    assert response.status_code == 204
    assert not SSHKey.objects.filter(pk=key.pk).exists()


def test_a_post_action_is_conditional_on_the_object_it_acts_on(api_for, operator, project):
    disk = disk_create(project=project, actor=operator, name="data", zone="local-1a", size_gb=2)
    api = api_for("operator")
    response = send(api, "post", f"/projects/alpha/disks/{disk.pk}/resize", {"size_gb": 5},
                    if_match='"stale"')  # fmt: skip
    assert response.status_code == 412
    disk.refresh_from_db()
    assert disk.size_gb == 2


def test_if_match_on_a_missing_object_is_404(api_for, operator):
    response = send(api_for("operator"), "delete", "/projects/alpha/disks/999", if_match="*")
    assert response.status_code == 404


def test_a_write_answers_the_etag_the_next_get_has(api_for, operator, instance):
    api = api_for("operator")
    created = api.post("/projects/alpha/disks", {"name": "d", "zone": "local-1a", "size_gb": 2})
    disk = f"/projects/alpha/disks/{created.json()['id']}"
    assert created.headers["ETag"] == api.get(disk).headers["ETag"]
    writes = [
        (f"{disk}/resize", {"size_gb": 3}, disk),
        (f"{disk}/attach", {"instance": instance.pk}, disk),
        (f"/projects/alpha/instances/{instance.pk}/run-strategy", {"run_strategy": "Halted"},
         f"/projects/alpha/instances/{instance.pk}"),
        ("/projects/alpha/ssh-keys", {"name": "k", "public_key": public_key()}, None),
    ]  # fmt: skip
    for path, body, read in writes:
        answer = api.post(path, body)
        assert answer.status_code in (200, 201), answer.content
        read = read or f"{path}/{answer.json()['id']}"
        assert answer.headers["ETag"] == api.get(read).headers["ETag"], path


def test_if_none_match_answers_304_while_the_object_is_unchanged(api_for, operator, instance, path):
    api = api_for("operator")
    tag = api.get(path).headers["ETag"]
    unchanged = api.client.get(f"/api/v1{path}", headers={**api.headers, "If-None-Match": tag})
    assert (unchanged.status_code, unchanged.content, unchanged.headers["ETag"]) == (304, b"", tag)
    Instance.objects.filter(pk=instance.pk).update(vcpus=4)
    changed = api.client.get(f"/api/v1{path}", headers={**api.headers, "If-None-Match": tag})
    assert changed.status_code == 200


def test_if_match_is_checked_after_who_asks(anonymous, instance, path):
    response = send(anonymous, "patch", path, {"run_strategy": "Halted"}, if_match='"x"')
    assert response.status_code == 401


def test_the_openapi_document_describes_etags_and_if_match(api_for, operator):
    document = api_for("operator").get("/openapi.json").json()
    instance = document["paths"]["/api/v1/projects/{slug}/instances/{instance_id}"]
    assert "ETag" in instance["get"]["responses"]["200"]["headers"]
    assert "If-None-Match" in [p["name"] for p in instance["get"]["parameters"]]
    for method in ("patch", "delete"):
        assert "If-Match" in [p["name"] for p in instance[method]["parameters"]]
        assert "412" in instance[method]["responses"]


def test_every_kind_can_be_read_singly_with_its_etag(api_for, operator, project, instance, image):
    eip = eip_allocate(project=project, actor=operator)
    nic = instance.nics.get()
    api = api_for("operator")
    for path in [
        f"/projects/alpha/images/{image.pk}",
        f"/projects/alpha/elastic-ips/{eip.pk}",
        f"/projects/alpha/instances/{instance.pk}/nics/{nic.pk}",
        "/projects/alpha",
    ]:
        response = api.get(path)
        assert (response.status_code, "ETag" in response.headers) == (200, True), path


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "postgresql" not in settings.DATABASES["default"]["ENGINE"],
    reason="the lock between If-Match and the write is PostgreSQL's (CI runs on it)",
)
def test_two_writers_holding_one_etag_cannot_both_pass(api_for, operator, instance, monkeypatch):
    path = f"/projects/alpha/instances/{instance.pk}"
    api = api_for("operator")
    tag = api.get(path).headers["ETag"]
    inside, release = threading.Event(), threading.Event()
    real = instances_api.instance_set_run_strategy

    def slow(**kwargs):  # the first writer, between its check and its commit
        real(**kwargs)
        if kwargs["strategy"] == "Halted":
            inside.set()
            release.wait(10)

    monkeypatch.setattr(instances_api, "instance_set_run_strategy", slow)
    answers = {}

    def write(strategy):
        answers[strategy] = send(api, "patch", path, {"run_strategy": strategy}, if_match=tag)
        connection.close()  # the thread's own connection

    first = threading.Thread(target=write, args=("Halted",))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=write, args=("Always",))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # it waits for the first writer's transaction
    release.set()
    first.join(10)
    second.join(10)
    assert (answers["Halted"].status_code, answers["Always"].status_code) == (200, 412)
    instance.refresh_from_db()
    assert instance.run_strategy == RunStrategy.HALTED
