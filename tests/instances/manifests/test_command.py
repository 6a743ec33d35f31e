"""`manage.py apply`: who acts, where the manifests come from, and its help."""

import io
import textwrap

import pytest
from django.core.management import CommandError, call_command

from instances.management.commands.apply import HELP
from instances.models import Instance
from tests.instances.manifests.conftest import MANIFEST

pytestmark = pytest.mark.django_db


@pytest.fixture
def manifests(tmp_path, monkeypatch, subnet, image, operator):
    """A folder `deploy/` with two manifests, the current folder being its parent."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZOPDAY_USER", raising=False)
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "web-1.yaml").write_text(MANIFEST)
    (tmp_path / "deploy" / "web-2.yml").write_text(MANIFEST.replace("web-1", "web-2"))
    (tmp_path / "deploy" / "README.md").write_text("not a manifest")
    return tmp_path / "deploy"


def run(*arguments: str) -> str:
    out = io.StringIO()
    call_command("apply", *arguments, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_acting_user_is_required(manifests):
    with pytest.raises(CommandError, match=r"Name the acting user with --user or \$ZOPDAY_USER."):
        run("-f", "deploy/web-1.yaml")
    assert not Instance.objects.exists()


def test_the_acting_user_may_come_from_the_environment(manifests, monkeypatch):
    monkeypatch.setenv("ZOPDAY_USER", "operator")
    run("-f", "deploy/web-1.yaml")
    assert Instance.objects.get().name == "web-1"


def test_an_unknown_or_inactive_user_is_refused(manifests, operator):
    with pytest.raises(CommandError, match="No user named ghost."):
        run("-f", "deploy/web-1.yaml", "--user", "ghost")
    operator.is_active = False
    operator.save()
    with pytest.raises(CommandError, match="The user operator is inactive."):
        run("-f", "deploy/web-1.yaml", "--user", "operator")


def test_a_folder_applies_its_yaml_files_in_name_order(manifests):
    output = run("-f", "deploy", "--user", "operator")
    assert [line for line in output.splitlines() if line.startswith("+ instance")] == [
        "+ instance alpha/web-1 (create)",
        "+ instance alpha/web-2 (create)",
    ]


def test_problems_name_the_file_they_are_in(manifests):
    (manifests / "web-2.yml").write_text(
        MANIFEST.replace("web-1", "web-2").replace("root_size_gb: 2", "root_size_gb: x")
    )
    err = io.StringIO()
    with pytest.raises(CommandError, match="Nothing was applied: 1 problem."):
        call_command("apply", "-f", "deploy", "--user", "operator", stderr=err)
    assert err.getvalue().startswith("deploy/web-2.yml:7 (instance web-2): root_size_gb: ")
    assert not Instance.objects.exists()


def test_a_manifest_may_come_from_standard_input(manifests, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(MANIFEST))
    run("-f", "-", "--user", "operator")
    assert Instance.objects.get().name == "web-1"


def test_a_missing_file_is_named(manifests):
    with pytest.raises(CommandError, match="deploy/web-9.yaml: no such file."):
        run("-f", "deploy/web-9.yaml", "--user", "operator")


def test_the_help_shows_an_example_manifest(capsys):
    with pytest.raises(SystemExit):
        call_command("apply", "--help")
    text = capsys.readouterr().out
    assert "  kind: Instance\n  project: demo\n  name: web-1\n" in text
    assert "--dry-run" in text and "ZOPDAY_USER" in text


def test_the_example_in_the_help_applies_on_the_demo_install(tmp_path, monkeypatch):
    """The manifest `apply --help` shows works on what `manage.py seed_demo` makes."""
    call_command("seed_demo", stdout=io.StringIO())
    example = HELP.split("on the demo install:\n\n", 1)[1].split("\n\n", 1)[0]
    (tmp_path / "web-1.yaml").write_text(textwrap.dedent(example))
    out = io.StringIO()
    call_command("apply", "-f", str(tmp_path / "web-1.yaml"), "--user", "admin", stdout=out)
    assert out.getvalue().splitlines()[0] == "+ instance demo/web-1 (create)"
    assert Instance.objects.get(name="web-1").nics.count() == 2
