"""Every kind in manifests: references by name, export → apply is a no-op, problems at their
field's line, nothing half-made, and prune."""

import io
import textwrap

import pytest
from django.core.management import CommandError, call_command

from instances.choices import PowerState
from instances.manifests import ManifestInvalid, manifest_apply, project_manifest
from instances.models import Disk, ElasticIP, Instance, ManagedObject, SSHKey, Subnet
from instances.services.network import subnet_create
from instances.services.storage import disk_create

pytestmark = pytest.mark.django_db

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz3aP5Vbq6oE2p1wGJr7j4T0vU0m3x2n8Y9b8mR1vXa me@host"

EVERYTHING = f"""\
kind: Subnet
project: alpha
name: front
spec:
  zone: local-1a
  cidr_v4: 10.30.0.0/24
---
kind: SSHKey
project: alpha
name: me
spec:
  public_key: {KEY}
---
kind: Disk
project: alpha
name: spare
spec: {{zone: local-1a, size_gb: 3}}
---
kind: Instance
project: alpha
name: web-1
spec:
  zone: local-1a
  root_image: demo
  root_size_gb: 2
  ssh_keys: [me]
  nics:
    - {{subnet: front}}
---
kind: ElasticIP
project: alpha
name: web-1-public
spec:
  nic: web-1/eth0
"""


@pytest.fixture
def applied(monkeypatch, owner, image):
    """applied(text, *flags) → apply's output, run by the project's admin (who may delete)."""

    def apply(text: str, *flags: str) -> str:
        monkeypatch.setattr("sys.stdin", io.StringIO(textwrap.dedent(text)))
        out = io.StringIO()
        call_command("apply", "-f", "-", "--user", "owner", *flags, stdout=out)
        return out.getvalue()

    return apply


def test_every_kind_is_made_with_references_by_name(applied, project):
    applied(EVERYTHING)
    instance = Instance.objects.get(name="web-1")
    assert [key.name for key in instance.ssh_keys.all()] == ["me"]
    assert instance.nics.get().subnet.name == "front"
    assert Disk.objects.get(name="spare").size_gb == 3
    assert ElasticIP.objects.get().nic == instance.nics.get()
    assert set(ManagedObject.objects.values_list("kind", "name")) == {
        ("Subnet", "front"), ("SSHKey", "me"), ("Disk", "spare"), ("Instance", "web-1"),
        ("ElasticIP", "web-1-public"),
    }  # fmt: skip


def test_a_project_export_applies_back_as_no_change(applied, project):
    applied(EVERYTHING)
    exported = project_manifest(project, redact=False)
    output = applied(exported, "--dry-run").splitlines()
    assert output[-1].startswith("Dry run, nothing changed: 0 to create, 0 to change,")
    assert all(line.startswith("  ") for line in output[:-1]), output
    out = io.StringIO()
    call_command("export", "--project", "alpha", "Instance/web-1", stdout=out)
    assert "kind: Instance" in out.getvalue() and "root_image: demo" in out.getvalue()


def test_an_export_of_objects_apply_never_made_is_a_no_op_too(applied, project, owner, image):
    subnet_create(project=project, actor=owner, name="made-here", zone="local-1a",
                  cidr_v4="10.40.0.0/24")  # fmt: skip
    output = applied(project_manifest(project, redact=False), "--dry-run")
    assert "0 to create, 0 to change" in output


def test_bad_input_in_each_kind_is_at_its_fields_line(applied, project):
    bad = (
        EVERYTHING.replace("cidr_v4: 10.30.0.0/24", "cidr_v4: 10.30.0.0/33")
        .replace("size_gb: 3}", "size_gb: many}")
        .replace(f"public_key: {KEY}", "public_key: nonsense")
        .replace("nic: web-1/eth0", "nic: web-9/eth0")
    )
    with pytest.raises(CommandError, match="Nothing was applied"):
        applied(bad)
    assert not Subnet.objects.filter(name="front").exists()
    assert not SSHKey.objects.exists() and not Instance.objects.exists()
    assert not ManagedObject.objects.exists()


def test_problems_name_the_line_of_each_field(owner, image):
    bad = (
        EVERYTHING.replace("cidr_v4: 10.30.0.0/24", "cidr_v4: nonsense")
        .replace("size_gb: 3}", "size_gb: many}")
        .replace(f"public_key: {KEY}", "public_key: nonsense")
        .replace("nic: web-1/eth0", "nic: web-9/eth0")
    )
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", bad)], actor=owner)
    problems = [str(problem) for problem in raised.value.problems]
    assert problems[0].startswith("m.yaml:6 (subnet front): cidr_v4: ")
    assert problems[1].startswith("m.yaml:12 (ssh-key me): public_key: This is not a valid")
    assert problems[2].startswith(
        "m.yaml:17 (disk spare): size_gb: Input should be a valid integer"
    )
    assert problems[-1] == (
        "m.yaml:34 (elastic-ip web-1-public): nic: Choose an interface of this project. "
        "Name it as instance/eth0."
    )
    assert not Subnet.objects.filter(name="front").exists()


def test_an_elastic_ip_naming_an_interface_by_a_foreign_id_is_told_at_its_line(owner, image):
    bad = EVERYTHING.replace("nic: web-1/eth0", "nic: 999999")
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", bad)], actor=owner)
    assert [str(problem) for problem in raised.value.problems] == [
        "m.yaml:34 (elastic-ip web-1-public): nic: Choose an interface of this project."
    ]
    assert not Instance.objects.exists() and not ElasticIP.objects.exists()


def test_a_document_naming_one_that_failed_says_that_is_why(owner, image):
    bad = EVERYTHING.replace("cidr_v4: 10.30.0.0/24", "cidr_v4: nonsense").replace(
        f"public_key: {KEY}", "public_key: nonsense"
    )
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", bad)], actor=owner)
    problems = [str(problem) for problem in raised.value.problems]
    assert problems[2:] == [
        "m.yaml:26 (instance web-1): ssh_keys: The ssh-key me was not made, because its own "
        "document failed: see m.yaml:8 (ssh-key me).",
        "m.yaml:28 (instance web-1): nics-0-subnet: The subnet front was not made, because its "
        "own document failed: see m.yaml:1 (subnet front).",
        "m.yaml:34 (elastic-ip web-1-public): nic: The instance web-1 was not made, because its "
        "own document failed: see m.yaml:19 (instance web-1).",
    ]
    assert not any("Choose" in problem for problem in problems)


def test_prune_lists_then_removes_only_what_apply_manages(applied, project, owner):
    subnet_create(project=project, actor=owner, name="by-hand", zone="local-1a",
                  cidr_v4="10.50.0.0/24")  # fmt: skip
    applied(EVERYTHING)
    fewer = EVERYTHING.split("---\nkind: Disk")[0]
    dry = applied(fewer, "--prune", "--dry-run")
    assert "- disk alpha/spare (delete)" in dry
    assert "- instance alpha/web-1 (delete)" in dry
    assert "- elastic-ip alpha/web-1-public (delete)" in dry
    assert "by-hand" not in dry
    assert Disk.objects.filter(name="spare").exists()
    applied(fewer, "--prune")
    assert not Disk.objects.filter(name="spare").exists()
    assert not Instance.objects.exists() and not ElasticIP.objects.exists()
    assert Subnet.objects.filter(name="by-hand").exists()
    assert set(ManagedObject.objects.values_list("name", flat=True)) == {"front", "me"}


def test_prune_leaves_alone_an_object_made_by_hand_under_a_managed_name(applied, project, owner):
    applied(EVERYTHING)
    Disk.objects.get(name="spare").delete()  # apply's disk goes, by hand
    disk_create(project=project, actor=owner, name="spare", zone="local-1a", size_gb=5)
    fewer = EVERYTHING.split("---\nkind: Disk")[0]
    dry = applied(fewer, "--prune", "--dry-run")
    assert "not the one apply made (that one is gone): left alone" in dry
    applied(fewer, "--prune")
    assert Disk.objects.get(name="spare").size_gb == 5
    assert not ManagedObject.objects.filter(name="spare").exists()


def test_prune_refuses_a_running_instance_unless_forced(applied, project):
    applied(EVERYTHING)
    Instance.objects.update(power_state=PowerState.RUNNING)
    fewer = EVERYTHING.split("---\nkind: Instance")[0]
    with pytest.raises(CommandError):
        applied(fewer, "--prune")
    assert Instance.objects.exists()
    applied(fewer, "--prune", "--force")
    assert not Instance.objects.exists()


def test_the_api_and_the_pages_export_what_apply_takes_back(applied, api_for, client_for):
    applied(EVERYTHING)
    answer = api_for("operator").get("/projects/alpha/manifests")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/yaml"
    assert "0 to create, 0 to change" in applied(answer.content.decode(), "--dry-run")
    one = api_for("operator").get("/projects/alpha/manifests/Subnet/front")
    assert "kind: Subnet" in one.content.decode() and "kind: Instance" not in one.content.decode()
    assert api_for("operator").get("/projects/alpha/manifests/Subnet/nowhere").status_code == 404
    page = client_for("viewer").get("/projects/alpha/manifest.yaml")
    assert page.status_code == 200 and b"name: web-1-public" in page.content
    row = client_for("viewer").get("/projects/alpha/manifest/Instance/web-1.yaml")
    assert b"kind: Instance" in row.content
