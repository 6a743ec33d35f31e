"""Images users register on the Images page and through the API: real qemu-img and pycdlib
check what is uploaded; what fails leaves nothing behind."""

import html
import io
import subprocess
from pathlib import Path

import pycdlib
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.test import Client
from django.urls import reverse

from instances.choices import ImageKind
from instances.models import AuditEvent, Disk, Image
from tests.factories import ImageFactory
from tests.instances.api.helpers import Api
from tests.instances.image_files import fifo_decoy, polyglot, qcow2, vmdk_descriptor

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def images_dir(settings, tmp_path):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"
    return settings.ZOPDAY_IMAGES_DIR


def data_file_image(folder: Path) -> Path:
    """A qcow2 image whose data lives in another file (here raw.img)."""
    path = folder / "external.qcow2"
    options = f"data_file={folder / 'raw.img'},data_file_raw=on"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", options, str(path), "64K"],
                   check=True)  # fmt: skip
    return path


def iso(folder: Path) -> Path:
    image = pycdlib.PyCdlib()
    image.new(interchange_level=3, vol_ident="TOOLS")
    data = b"drivers\n"
    image.add_fp(io.BytesIO(data), len(data), "/README.;1")
    path = folder / "tools.iso"
    image.write(str(path))
    image.close()
    return path


def upload(path: Path) -> SimpleUploadedFile:
    return SimpleUploadedFile(path.name, path.read_bytes())


def left_in(images_dir: Path) -> list[str]:
    folder = images_dir / "uploads" / "alpha"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_operator_uploads_a_qcow2_image_whose_virtual_size_is_its_minimum_disk(
    client_for, project, images_dir, tmp_path
):
    url = reverse("image-list", args=[project.slug])
    assert 'enctype="multipart/form-data"' in client_for("operator").get(url).text
    assert "Upload and register" not in client_for("viewer").get(url).text
    data = {"name": "ubuntu-24.04", "kind": "qcow2", "os_type": "linux",
            "description": "noble", "file": upload(qcow2(tmp_path))}  # fmt: skip
    page = client_for("operator").post(url, data, follow=True).text
    assert "Image ubuntu-24.04 registered (root disks of 3 GB or more)." in page
    image = Image.objects.get(name="ubuntu-24.04")
    assert (image.project, image.kind, image.min_disk_gb) == (project, ImageKind.QCOW2, 3)
    assert image.path == f"uploads/alpha/{image.pk}.qcow2"
    assert image.file.read_bytes() == (tmp_path / "cloud.qcow2").read_bytes()
    assert left_in(images_dir) == [f"{image.pk}.qcow2"]
    assert AuditEvent.objects.filter(action="image.upload", outcome="success").count() == 1


def test_an_uploaded_iso_says_where_it_is_used(client_for, project, images_dir, tmp_path):
    url = reverse("image-list", args=[project.slug])
    data = {"name": "tools", "kind": "iso", "os_type": "linux", "file": upload(iso(tmp_path))}
    page = html.unescape(client_for("operator").post(url, data, follow=True).text)
    assert (
        "Image tools registered: choose it as a new instance's CD-ROM, or insert it in an "
        "instance's CD-ROM drive on its Storage tab."
    ) in page


@pytest.mark.parametrize(
    ("kind", "make", "message"),
    [
        ("qcow2", lambda folder: folder / "raw.img", "This file is not a qcow2 image: upload a "
                                                     "standalone qcow2 cloud image"),
        ("qcow2", lambda folder: data_file_image(folder),
         "This qcow2 image depends on another file (a backing file"),
        ("qcow2", lambda folder: qcow2(folder, "overlay.qcow2", backing=folder / "raw.img"),
         "This qcow2 image depends on another file (a backing file"),
        ("iso", lambda folder: folder / "raw.img", "This is not an ISO 9660 image"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_sound_image_of_its_kind_is_refused_at_the_file(
    client_for, project, images_dir, tmp_path, kind, make, message
):
    (tmp_path / "raw.img").write_bytes(b"\0" * 65536)
    data = {"name": "mine", "kind": kind, "os_type": "linux", "file": upload(make(tmp_path))}
    page = html.unescape(
        client_for("operator").post(reverse("image-list", args=[project.slug]), data).text
    )
    assert '<p class="error" id="file-error">' + message in page
    assert 'value="mine"' in page  # what was typed is kept
    assert not Image.objects.exists() and left_in(images_dir) == []


def test_a_file_both_an_iso_and_a_qcow2_naming_a_host_file_is_refused_as_an_iso(
    client_for, api_for, project, images_dir, tmp_path
):
    attack = polyglot(tmp_path)
    data = {"name": "tools", "kind": "iso", "os_type": "linux", "file": upload(attack)}
    page = html.unescape(
        client_for("operator").post(reverse("image-list", args=[project.slug]), data).text
    )
    assert (
        '<p class="error" id="file-error">This file is a qcow2 image, not an ISO: upload a qcow2 '
        "image or an ISO."
    ) in page
    with attack.open("rb") as file:
        fields = {"file": file, "name": "tools", "kind": "iso"}
        response = api_for("operator").upload("/projects/alpha/images", fields)
    assert response.status_code == 422
    assert "This file is a qcow2 image, not an ISO" in response.json()["errors"]["file"][0]
    assert not Image.objects.exists() and left_in(images_dir) == []


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("iso", "This file is a VMDK image, not an ISO: upload a qcow2 image or an ISO."),
        ("qcow2", "This file is a VMDK image, not a qcow2 image: upload a qcow2 image or an ISO"),
    ],
)
def test_a_vmdk_naming_a_host_file_is_refused_without_the_file_being_opened(
    client_for, project, images_dir, tmp_path, kind, message
):
    decoy = fifo_decoy(tmp_path)  # an open of it would wait for a writer that never comes
    data = {"name": "tools", "kind": kind, "os_type": "linux",
            "file": upload(vmdk_descriptor(tmp_path, decoy))}  # fmt: skip
    page = html.unescape(
        client_for("operator").post(reverse("image-list", args=[project.slug]), data).text
    )
    assert '<p class="error" id="file-error">' + message in page
    assert str(tmp_path) not in page and "decoy" not in page
    assert not Image.objects.exists() and left_in(images_dir) == []


def test_what_qemu_img_says_of_a_file_it_cannot_read_is_not_shown(
    client_for, project, images_dir, tmp_path, caplog
):
    broken = tmp_path / "broken.qcow2"
    broken.write_bytes(b"QFI\xfb\0\0\0\3".ljust(4096, b"\0"))  # a qcow2 header, all zero
    data = {"name": "mine", "kind": "qcow2", "os_type": "linux", "file": upload(broken)}
    page = html.unescape(
        client_for("operator").post(reverse("image-list", args=[project.slug]), data).text
    )
    assert (
        '<p class="error" id="file-error">qemu-img cannot read this image: upload a sound qcow2 '
        "image or an ISO.</p>"
    ) in page
    assert str(images_dir) in caplog.text  # qemu-img's own words, which name the file, logged
    assert str(images_dir) not in page and ".upload-" not in page
    assert not Image.objects.exists() and left_in(images_dir) == []


class CountingUploadHandler(FileUploadHandler):
    """Counts the bytes of uploaded files Django reads, before any handler stores them."""

    received: list[int] = []

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        CountingUploadHandler.received.append(len(raw_data))
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def test_a_viewers_upload_is_refused_before_any_of_it_is_read(
    settings, project, viewer, outsider, operator, api_for, tmp_path
):
    handlers = [f"{__name__}.CountingUploadHandler", *settings.FILE_UPLOAD_HANDLERS]
    settings.FILE_UPLOAD_HANDLERS = handlers
    received = CountingUploadHandler.received = []
    path, url = qcow2(tmp_path, size="1G"), reverse("image-list", args=[project.slug])

    def browser(user):  # CSRF checked as in a browser: the middleware reads form bodies
        client = Client(enforce_csrf_checks=True)
        client.force_login(user)
        client.get("/login/")
        return client, client.cookies["csrftoken"].value

    client, token = browser(viewer)
    fields = {"csrfmiddlewaretoken": token, "name": "mine", "kind": "qcow2", "os_type": "linux"}
    assert client.post(url, {**fields, "file": upload(path)}).status_code == 403
    with path.open("rb") as file:
        session = Api(client, {"X-CSRFToken": token})
        assert session.upload("/projects/alpha/images", {**fields, "file": file}).status_code == 403
    with path.open("rb") as file:
        answer = api_for("viewer").upload("/projects/alpha/images", {**fields, "file": file})
        assert answer.status_code == 403
    client, token = browser(outsider)
    answer = client.post(url, {**fields, "csrfmiddlewaretoken": token, "file": upload(path)})
    assert answer.status_code == 404
    assert received == [] and not Image.objects.exists()

    client, token = browser(operator)
    fields["csrfmiddlewaretoken"] = token
    assert client.post(url, {**fields, "file": upload(path)}).status_code == 302
    assert sum(received) == path.stat().st_size
    assert client.post(url, {**fields, "csrfmiddlewaretoken": "x" * 64}).status_code == 403


def test_names_kinds_and_sizes_are_checked_before_the_file_is_kept(
    api_for, project, images_dir, tmp_path, settings
):
    ImageFactory(name="debian-12", project=None)
    api = api_for("operator")
    path = qcow2(tmp_path, size="1G")

    def refused(**fields: object) -> dict:
        with path.open("rb") as file:
            response = api.upload("/projects/alpha/images", {"file": file, **fields})
        assert response.status_code == 422, response.content
        return response.json()["errors"]

    assert refused(name="debian-12", kind="qcow2") == {
        "name": ["An image called debian-12 exists already: choose another name."]
    }
    assert refused(name=" ", kind="qcow2") == {"name": ["Give the image a name."]}
    assert refused(name="disk", kind="container") == {
        "kind": ["Upload a qcow2 cloud image or an ISO image."]
    }
    settings.ZOPDAY_IMAGE_UPLOAD_MAX_GB = 0
    assert refused(name="disk", kind="qcow2") == {
        "file": ["The file is larger than 0 GB, the largest image taken here."]
    }
    assert not Image.objects.filter(project=project).exists() and left_in(images_dir) == []


def test_of_two_uploads_of_one_name_the_second_is_refused_and_leaves_nothing(
    api_for, project, images_dir, tmp_path, monkeypatch
):
    from instances.services import images as image_service

    check_file = image_service.image_file_check

    def meanwhile(received, kind):  # the other upload lands while this file is checked
        ImageFactory(name="mine", project=project)
        return check_file(received, kind)

    monkeypatch.setattr(image_service, "image_file_check", meanwhile)
    with qcow2(tmp_path, size="1G").open("rb") as file:
        response = api_for("operator").upload(
            "/projects/alpha/images", {"file": file, "name": "mine", "kind": "qcow2"}
        )
    assert response.status_code == 422, response.content
    assert response.json()["errors"] == {
        "name": ["An image called mine exists already: choose another name."]
    }
    assert Image.objects.filter(project=project).count() == 1 and left_in(images_dir) == []


def test_an_iso_is_uploaded_through_the_api_and_removed_when_no_disk_uses_it(
    api_for, project, images_dir, tmp_path, operator
):
    api = api_for("operator")
    with iso(tmp_path).open("rb") as file:
        assert (
            api_for("viewer")
            .upload("/projects/alpha/images", {"file": file, "name": "tools", "kind": "iso"})
            .status_code
            == 403
        )
        file.seek(0)
        response = api.upload(
            "/projects/alpha/images",
            {"file": file, "name": "tools", "kind": "iso", "os_type": "other"},
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["kind"], body["os_type"], body["min_disk_gb"], body["shared"]) == (
        "iso",
        "other",
        1,
        False,
    )
    image = Image.objects.get(pk=body["id"])
    assert image.file.is_file()
    listed = [row["name"] for row in api_for("viewer").get("/projects/alpha/images").json()]
    assert "tools" in listed

    disk = Disk.objects.create(project=project, zone="local-1a", name="cd", role="cdrom",
                               bus="sata", image=image)  # fmt: skip
    refused = api.delete(f"/projects/alpha/images/{image.pk}")
    assert refused.status_code == 409
    assert "Disks were made from tools (cd): delete them first." in refused.json()["detail"]
    disk.delete()
    assert api.delete(f"/projects/alpha/images/{image.pk}").status_code == 204
    assert not Image.objects.filter(pk=image.pk).exists() and not image.file.exists()


def test_shared_images_are_not_removed_from_a_project(client_for, project):
    shared = ImageFactory(name="debian-12", project=None)
    url = reverse("image-list", args=[project.slug])
    assert 'aria-label="Remove image debian-12"' not in client_for("owner").get(url).text
    delete = reverse("image-delete", args=[project.slug, shared.pk])
    assert client_for("owner").post(delete).status_code == 404
    assert Image.objects.filter(pk=shared.pk).exists()


def test_the_page_removes_a_project_image(client_for, project, tmp_path, images_dir):
    url = reverse("image-list", args=[project.slug])
    data = {"name": "mine", "kind": "qcow2", "os_type": "linux", "file": upload(qcow2(tmp_path))}
    client_for("operator").post(url, data)
    image = Image.objects.get(name="mine")
    delete = reverse("image-delete", args=[project.slug, image.pk])
    assert client_for("viewer").post(delete).status_code == 403
    page = client_for("operator").post(delete, follow=True).text
    assert "Image mine removed." in page and left_in(images_dir) == []


def test_a_qcow2_of_a_petabyte_virtual_size_is_refused_at_the_file(
    client_for, project, images_dir, tmp_path
):
    huge = qcow2(tmp_path, "huge.qcow2", size="1P")  # a few hundred KiB on disk
    data = {"name": "huge", "kind": "qcow2", "os_type": "linux", "file": upload(huge)}
    page = html.unescape(
        client_for("operator").post(reverse("image-list", args=[project.slug]), data).text
    )
    assert (
        '<p class="error" id="file-error">Its virtual size is 1.0 PiB; an image here is at most '
        "2048 GiB." in page
    )
    assert not Image.objects.exists() and left_in(images_dir) == []


def test_an_upload_past_the_projects_image_quota_is_refused_saying_the_quota_and_the_use(
    api_for, project, images_dir, tmp_path, settings
):
    api = api_for("operator")
    first = qcow2(tmp_path, "first.qcow2", size="1G")
    with first.open("rb") as file:
        assert api.upload("/projects/alpha/images", {"file": file, "name": "first",
                                                     "kind": "qcow2"}).status_code == 201  # fmt: skip
    used = Image.objects.get(name="first").file.stat().st_size
    settings.ZOPDAY_PROJECT_IMAGE_QUOTA_GB = 0  # nothing more fits
    second = qcow2(tmp_path, "second.qcow2", size="1G")
    with second.open("rb") as file:
        response = api.upload("/projects/alpha/images", {"file": file, "name": "second",
                                                         "kind": "qcow2"})  # fmt: skip
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "file": [
            f"This file ({second.stat().st_size / 1024:.1f} KiB) would take the project's images "
            f"past their quota of 0 B: {used / 1024:.1f} KiB are in use. Remove an image the "
            "project no longer needs."
        ]
    }
    assert left_in(images_dir) == [f"{Image.objects.get(name='first').pk}.qcow2"]
