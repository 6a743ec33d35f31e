"""The console on SQLite in a run folder that is full, in a process of its own (the test's
database is PostgreSQL): tests/instances/test_disk_full.py runs it and reads the JSON it prints
of what each request answered.

Usage: python -m tests.instances.disk_full_console (with ZOPDAY_RUN_DIR on a small filesystem).
"""

import json
import os
import sys

import django

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi ops@desk"
PASSWORD = "a long enough password 1"


def seed() -> tuple[str, int, int]:
    """A project with an admin, who has an API token, a viewer, an instance and an uploaded
    image of 2 MiB: the token, the instance's id and the image's."""
    from django.contrib.auth.models import User

    from instances.choices import Role
    from instances.disk_full import reserve_keep
    from instances.models import Image, Membership, Project
    from instances.services.instances import instance_create
    from instances.services.tokens import api_token_create
    from tests.factories import SubnetFactory, instance_request

    user = User.objects.create_user("ops", password=PASSWORD)
    project = Project.objects.create(slug="alpha", name="Alpha")
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    viewer = User.objects.create_user("eve", password=PASSWORD)
    Membership.objects.create(project=project, user=viewer, role=Role.VIEWER)
    subnet = SubnetFactory(project=project)
    instance = instance_create(project=project, actor=user, request=instance_request(subnet))
    image = Image.objects.create(project=project, name="big", kind="qcow2", path="uploads/big")
    image.file.parent.mkdir(parents=True)
    image.file.write_bytes(b"\1" * 2**21)
    reserve_keep()  # as the web process does at its first request
    return api_token_create(user=user, name="ops")[1], instance.pk, image.pk


def fill(folder: str) -> None:
    """Write into the folder until nothing more fits, after SQLite has emptied its WAL (so that
    its next write needs room). The connection stays open, as a running console's does: the
    last one to close removes the WAL index, which a reader must create again."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    for size in (2**20, 2**12, 1):
        try:
            while True:
                os.write(fd, b"\1" * size)
        except OSError:
            continue
    os.close(fd)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")
    django.setup()
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    token, instance_id, image_id = seed()
    fill(os.environ["ZOPDAY_RUN_DIR"])

    answers: dict[str, object] = {}
    browser = Client(raise_request_exception=False)
    answers["login page"] = browser.get("/login/").status_code
    login = browser.post("/login/", {"username": "ops", "password": PASSWORD})
    answers["login"] = [login.status_code, login.get("Location", "")]
    page = browser.get("/projects/alpha/ssh-keys/")
    answers["page after login"] = page.status_code
    add = browser.post("/projects/alpha/ssh-keys/", {"name": "desk", "public_key": KEY})
    answers["key added on the page"] = [add.status_code, add.content.decode()]
    api = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    answers["token read"] = api.get("/api/v1/projects/alpha/ssh-keys").status_code
    create = api.post(
        "/api/v1/projects/alpha/ssh-keys",
        {"name": "desk", "public_key": KEY},
        content_type="application/json",
    )
    answers["key added by the api"] = [create.status_code, create.content.decode()]
    from instances.models import Image

    removed = browser.post(f"/projects/alpha/images/{image_id}/delete/")
    answers["image removed"] = [removed.status_code, Image.objects.filter(pk=image_id).exists()]
    viewer = Client(raise_request_exception=False)
    viewer.post("/login/", {"username": "eve", "password": PASSWORD})
    start = f"/projects/alpha/instances/{instance_id}/power/start/"
    refused = viewer.post(start, follow=True)
    answers["start refused to a viewer"] = [refused.status_code, refused.content.decode()]
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
