"""Image documents: an image from a URL, served by a real HTTP server on loopback. Apply starts
the import; once it is done, the project's export applies back as no change. Bad input is told
at its field's line, and nothing is made or fetched."""

import hashlib

import pytest

from instances.choices import ImportStatus
from instances.manifests import ManifestInvalid, manifest_apply, project_manifest
from instances.models import Disk, Image, ImageImport, ManagedObject
from instances.services import image_import_work
from instances.services.image_import_work import image_import_run
from tests.instances.test_images import qcow2

pytestmark = pytest.mark.django_db

DOCUMENTS = """\
kind: Image
project: alpha
name: noble
spec:
  format: qcow2
  url: {url}
  sha256: {sha256}
  os_type: linux
  description: Ubuntu 24.04
---
kind: Disk
project: alpha
name: scratch
spec: {{zone: local-1a, size_gb: 3, image: noble}}
"""


@pytest.fixture(autouse=True)
def images_dir(settings, tmp_path, monkeypatch):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"
    # the heartbeat thread writes on its own connection, which this test's transaction locks out
    monkeypatch.setattr(image_import_work, "HEARTBEAT_SECONDS", 3600)


@pytest.fixture
def served(image_server, tmp_path):
    """The URL of a small qcow2 on loopback, and its SHA-256."""
    body = qcow2(tmp_path, size="1G").read_bytes()
    image_server.serve("/noble.qcow2", body)
    return image_server.url("/noble.qcow2"), hashlib.sha256(body).hexdigest()


def verbs(plans):
    return {(plan.document.kind, plan.document.name): plan.verb for plan in plans}


def test_an_image_document_imports_it_and_its_export_applies_back_as_no_change(
    owner, project, served
):
    url, sha256 = served
    image_doc = DOCUMENTS.split("---\n")[0].format(url=url, sha256=sha256)
    plans = manifest_apply(sources=[("m.yaml", image_doc)], actor=owner)
    assert verbs(plans) == {("Image", "noble"): "create"}
    started = ImageImport.objects.get()
    assert (started.url, started.sha256, started.description) == (url, sha256, "Ubuntu 24.04")
    again = manifest_apply(sources=[("m.yaml", image_doc)], actor=owner, dry_run=True)
    assert verbs(again) == {("Image", "noble"): "unchanged"}  # under way: not started twice
    image_import_run(started.pk, started.attempt)
    started.refresh_from_db()
    assert started.status == ImportStatus.DONE, started.message
    manifest_apply(sources=[("m.yaml", DOCUMENTS.format(url=url, sha256=sha256))], actor=owner)
    assert Disk.objects.get(name="scratch").image == Image.objects.get(name="noble")
    assert set(ManagedObject.objects.values_list("kind", "name")) == {
        ("Image", "noble"), ("Disk", "scratch")
    }  # fmt: skip

    exported = project_manifest(project, redact=True)
    assert f"url: {url}" in exported and "name: noble" in exported
    plans = manifest_apply(sources=[("export.yaml", exported)], actor=owner, dry_run=True)
    assert verbs(plans) == {("Image", "noble"): "unchanged", ("Disk", "scratch"): "unchanged"}
    assert ImageImport.objects.count() == 1


def test_bad_image_documents_are_told_at_each_fields_line_and_nothing_is_fetched(
    owner, project, image_server, served
):
    url, _ = served
    bad = f"""\
kind: Image
project: alpha
name: noble
spec:
  format: vmdk
  url: {url}
  sha256: abc
  os_type: plan9
---
kind: Image
project: alpha
name: missing
spec:
  format: qcow2
  url: {image_server.url("/nowhere.qcow2")}
---
kind: Image
project: alpha
name: misspelt
spec:
  format: qcow2
  url: {url}
  checksum: abc
"""
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", bad)], actor=owner)
    problems = sorted(str(problem) for problem in raised.value.problems)
    assert [problem.split(": ", 2)[:2] for problem in problems] == [
        ["m.yaml:15 (image missing)", "url"],
        ["m.yaml:23 (image misspelt)", "checksum"],
        ["m.yaml:5 (image noble)", "format"],
        ["m.yaml:7 (image noble)", "sha256"],
        ["m.yaml:8 (image noble)", "os_type"],
    ]
    assert "answers 404" in problems[0]
    assert "Choose qcow2, raw or ISO." in problems[2]
    assert not ImageImport.objects.exists() and not Image.objects.exists()
    assert not ManagedObject.objects.exists()
    assert image_server.routes["/noble.qcow2"].sent == 0


def test_a_disk_naming_an_image_whose_document_failed_says_so(owner, project, served):
    url, _ = served
    bad = DOCUMENTS.format(url=url, sha256="abc")
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", bad)], actor=owner)
    assert [str(problem) for problem in raised.value.problems][-1] == (
        "m.yaml:14 (disk scratch): image: The image noble was not made, because its own "
        "document failed: see m.yaml:1 (image noble)."
    )
    assert not Disk.objects.exists()


def test_a_document_cannot_change_an_images_kind(owner, project, served):
    url, sha256 = served
    Image.objects.create(project=project, name="noble", kind="iso", path="uploads/alpha/1.iso",
                         description="Ubuntu 24.04")  # fmt: skip
    document = DOCUMENTS.split("---\n")[0].format(url=url, sha256=sha256)
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("m.yaml", document)], actor=owner)
    assert [str(problem) for problem in raised.value.problems] == [
        "m.yaml:5 (image noble): format: Cannot change on an existing image: noble has iso, the "
        "manifest says qcow2. Keep iso, or create a new image under another name."
    ]
    assert Image.objects.get().kind == "iso" and not ImageImport.objects.exists()
