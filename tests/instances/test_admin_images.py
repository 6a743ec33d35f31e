"""Images in the admin: a kind is fixed once registered, for staff and superusers alike, and a
file is registered only as what qemu-img, told no format, reads it to be."""

import html

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from instances.choices import ImageKind
from instances.models import Image
from tests.instances.image_files import iso, polyglot
from tests.instances.test_admin_roles import change_url, image_staff

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def images_dir(settings, tmp_path):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"
    (tmp_path / "images" / "uploads" / "alpha").mkdir(parents=True)
    return settings.ZOPDAY_IMAGES_DIR


@pytest.fixture
def registered_polyglot(project, images_dir, tmp_path):
    """An ISO registered before files were probed: it is also a qcow2 backed by a decoy."""
    polyglot(tmp_path).rename(images_dir / "uploads" / "alpha" / "1.iso")
    return Image.objects.create(
        project=project, name="tools", kind=ImageKind.ISO, path="uploads/alpha/1.iso"
    )


def form_of(image, **changes):
    return {"project": image.project_id or "", "name": image.name, "kind": image.kind,
            "os_type": image.os_type, "path": image.path, "reference": "",
            "min_disk_gb": image.min_disk_gb, "description": "", **changes}  # fmt: skip


def test_a_staff_operator_cannot_turn_an_iso_into_a_qcow2(project, registered_polyglot):
    client, _ = image_staff("imager", project)
    page = client.get(change_url(registered_polyglot)).text
    assert 'name="kind"' not in page
    answer = client.post(
        change_url(registered_polyglot), form_of(registered_polyglot, kind="qcow2")
    )
    assert answer.status_code == 302
    registered_polyglot.refresh_from_db()
    assert registered_polyglot.kind == ImageKind.ISO


def test_a_superuser_cannot_turn_an_iso_into_a_qcow2_either(admin_client, registered_polyglot):
    answer = admin_client.post(
        change_url(registered_polyglot), form_of(registered_polyglot, kind="qcow2")
    )
    assert answer.status_code == 302
    registered_polyglot.refresh_from_db()
    assert registered_polyglot.kind == ImageKind.ISO


def test_an_images_kind_is_fixed_once_registered_whatever_saves_it(registered_polyglot):
    registered_polyglot.kind = ImageKind.QCOW2
    for save in (registered_polyglot.full_clean, registered_polyglot.save):
        with pytest.raises(ValidationError, match="kind is fixed once it is registered"):
            save()
    registered_polyglot.refresh_from_db()
    assert registered_polyglot.kind == ImageKind.ISO
    registered_polyglot.save(update_fields=["description"])  # other fields still change


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (ImageKind.ISO, "This file is a qcow2 image, not an ISO: upload a qcow2 image or an ISO."),
        (ImageKind.QCOW2, "This qcow2 image depends on another file (a backing file"),
    ],
)
def test_the_admin_registers_no_file_that_is_not_a_standalone_image_of_its_kind(
    admin_client, project, images_dir, tmp_path, kind, message
):
    polyglot(tmp_path).rename(images_dir / "uploads" / "alpha" / "7.img")
    add = reverse("admin:instances_image_add")
    fields = form_of(Image(project=project, name="tools", kind=kind, path="uploads/alpha/7.img"))
    page = html.unescape(admin_client.post(add, fields).text)
    assert message in page
    assert not Image.objects.exists()


def test_the_admin_registers_a_sound_iso(admin_client, project, images_dir, tmp_path):
    iso(tmp_path).rename(images_dir / "uploads" / "alpha" / "8.iso")
    add = reverse("admin:instances_image_add")
    fields = form_of(Image(project=project, name="tools", kind="iso", path="uploads/alpha/8.iso"))
    assert admin_client.post(add, fields).status_code == 302
    assert Image.objects.get().kind == ImageKind.ISO
