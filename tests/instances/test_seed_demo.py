import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from instances.choices import Role
from instances.models import AuditEvent, Membership, Project

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent_and_prints_working_logins(settings, tmp_path, capsys):
    settings.RUN_DIR = tmp_path
    call_command("seed_demo")
    call_command("seed_demo")
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == out[1]
    password = (tmp_path / "demo-password").read_text().strip()
    assert f"password {password}" in out[0]

    assert Project.objects.filter(slug="demo").count() == 1
    roles = dict(
        Membership.objects.filter(project__slug="demo").values_list("user__username", "role")
    )
    assert roles == {
        "demo-admin": Role.ADMIN,
        "demo-operator": Role.OPERATOR,
        "demo-viewer": Role.VIEWER,
    }
    assert authenticate(username="admin", password=password).is_superuser
    assert AuditEvent.objects.filter(action="membership.add").count() == 3
