"""Images users register (a qcow2 cloud image or an ISO uploaded into the project's folder of the
images directory), checked before they are kept; and their removal.

Every file's real format is read from its header, whatever kind is claimed: a qcow2 must be
standalone (a backing or external data file would expose host files), pass qemu-img check and
stay within ZOPDAY_IMAGE_MAX_VIRTUAL_GB; an ISO must have no image header and be ISO 9660.
Uploads stay within ZOPDAY_PROJECT_IMAGE_QUOTA_GB; a file that fails is removed at once.
"""

import math
import os
import tempfile
from pathlib import Path

import pycdlib
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files import File
from django.db import transaction
from django.db.models import ProtectedError, Q

from instances import actions
from instances.access import project_role
from instances.backends.base import BackendError
from instances.backends.qemu.formats import FORMAT_NAMES
from instances.backends.qemu.images import GIB, QemuImg, standalone_refusal
from instances.choices import ImageKind, OsType
from instances.disk_full import freeing_space
from instances.errors import ActionRefused
from instances.models import Disk, Image, ImageImport, Project
from instances.services.audit import audit_record
from instances.services.image_quota import UPLOADS, quota_refusal
from instances.services.image_quota import size_text as _size
from instances.validators import validate_object_name

UPLOAD_KINDS: dict[str, str] = {ImageKind.QCOW2: "qcow2", ImageKind.ISO: "iso"}
UNREADABLE = "qemu-img cannot read this image: upload a sound qcow2 image or an ISO."


def image_upload(
    *,
    project: Project,
    actor: AbstractBaseUser,
    name: str,
    kind: str,
    upload: File,
    os_type: str = OsType.LINUX,
    description: str = "",
) -> Image:
    """Register an uploaded qcow2 cloud image or ISO for the project's instances."""
    actions.require(actions.manage(project_role(actor, project)))
    name = name.strip()
    _check_fields(project, name, kind, os_type, description, upload)
    folder = image_folder(project)
    handle, name_received = tempfile.mkstemp(dir=folder, prefix=".upload-")
    received = Path(name_received)
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
    except BaseException as error:
        _remove(received)
        if isinstance(error, OSError):  # the images folder is full, say
            raise _not_stored(error) from None
        raise
    return image_register_file(
        project=project, actor=actor, name=name, kind=kind, os_type=os_type,
        description=description, received=received, action="image.upload",
    )  # fmt: skip


def image_folder(project: Project) -> Path:
    """The project's folder of the images directory, made if missing."""
    folder = settings.ZOPDAY_IMAGES_DIR / UPLOADS / project.slug
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def image_register_file(
    *,
    project: Project,
    actor: AbstractBaseUser | None,
    name: str,
    kind: str,
    os_type: str,
    description: str,
    received: Path,
    action: str,
    import_id: int | None = None,
) -> Image:
    """Check a file received into the project's folder (an upload, an import) and register it
    as the project's image; the file is removed when anything fails."""
    folder = image_folder(project)
    stored: Path | None = None
    try:
        min_disk_gb = image_file_check(received, kind)
        with transaction.atomic():
            # Under the project's lock: of two uploads of one name, the second is refused here.
            Project.objects.select_for_update().filter(pk=project.pk).first()
            if _name_taken(project, name):
                raise ValidationError({"name": _taken_message(name)})
            size = received.stat().st_size
            if message := quota_refusal(project, size, excluding_import=import_id):
                raise ValidationError({"file": message})  # another upload or import won
            if import_id is not None:  # the import's hold becomes the file's own
                ImageImport.objects.filter(pk=import_id).update(bytes_reserved=0)
            image = Image.objects.create(
                project=project, name=name, kind=kind, os_type=os_type, min_disk_gb=min_disk_gb,
                description=description.strip(),
            )  # fmt: skip
            stored = folder / f"{image.pk}.{UPLOAD_KINDS[kind]}"
            image.path = str(stored.relative_to(settings.ZOPDAY_IMAGES_DIR))
            image.save(update_fields=["path"])
            os.replace(received, stored)
            audit_record(actor=actor, action=action, project=project, target=image)
    except OSError as error:  # the images folder is full, say
        _remove(received, stored)
        raise _not_stored(error) from None
    except BaseException:
        _remove(received, stored)
        raise
    return image


def _not_stored(error: OSError) -> ValidationError:
    return ValidationError(
        {"file": f"The console could not store the file: {error.strerror or error}."}
    )


def image_remove(*, image: Image, actor: AbstractBaseUser) -> None:
    """Remove a project's own image and its file; one that disks were made from stays."""
    if image.project is None:
        raise ActionRefused("Shared images are managed by administrators, in the admin.")
    actions.require(actions.manage(project_role(actor, image.project)))
    users = list(Disk.objects.filter(image=image).values_list("name", flat=True)[:5])
    if users:
        raise ActionRefused(
            f"Disks were made from {image.name} ({', '.join(users)}): delete them first."
        )

    pk = image.pk

    def remove_row() -> None:
        image.pk = pk  # a delete whose commit failed on a full disk has cleared it
        with transaction.atomic():
            audit_record(actor=actor, action="image.remove", project=image.project, target=image)
            image.delete()

    try:
        freeing_space(remove_row)
    except ProtectedError:  # a disk was made from it meanwhile
        raise ActionRefused(f"Disks were made from {image.name}: delete them first.") from None
    if image.path.startswith(f"{UPLOADS}/"):
        image.file.unlink(missing_ok=True)


def _remove(*paths: Path | None) -> None:
    for path in paths:
        if path is not None:
            path.unlink(missing_ok=True)


def _name_taken(project: Project, name: str) -> bool:
    return Image.objects.filter(Q(project=project) | Q(project=None), name=name).exists()


def _taken_message(name: str) -> str:
    return f"An image called {name} exists already: choose another name."


def _check_fields(
    project: Project, name: str, kind: str, os_type: str, description: str, upload: File
) -> None:
    errors = image_field_refusals(project, name, os_type, description)
    if kind not in UPLOAD_KINDS:
        errors["kind"] = "Upload a qcow2 cloud image or an ISO image."
    if message := image_size_refusal(project, upload.size or 0):
        errors["file"] = message
    if errors:
        raise ValidationError(errors)


def image_field_refusals(
    project: Project, name: str, os_type: str, description: str
) -> dict[str, str]:
    """What is wrong with a new image's name, OS and description, by field."""
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "Give the image a name."
    elif len(name) > 100:
        errors["name"] = "Use at most 100 characters."
    elif refusal := _name_refusal(name):
        errors["name"] = refusal
    elif _name_taken(project, name):
        errors["name"] = _taken_message(name)
    if os_type not in OsType.values:
        errors["os_type"] = f"Choose one of: {', '.join(OsType.values)}."
    if len(description.strip()) > 200:
        errors["description"] = "Use at most 200 characters."
    return errors


def _name_refusal(name: str) -> str:
    try:
        validate_object_name(name)
    except ValidationError as error:
        return error.messages[0]
    return ""


def image_size_refusal(project: Project, size: int, *, import_id: int | None = None) -> str:
    """Why a file of `size` bytes cannot become the project's image ("" when it can): empty,
    over the size cap, or past the project's quota (what import `import_id` holds aside)."""
    limit = settings.ZOPDAY_IMAGE_UPLOAD_MAX_GB
    if not size:
        return "The file is empty."
    if size > limit * GIB:
        return f"The file is larger than {limit} GB, the largest image taken here."
    return quota_refusal(project, size, excluding_import=import_id)


def image_file_check(path: Path, kind: str) -> int:
    """The smallest root disk (GB) the image needs; ValidationError at `file` unless the file's
    header says it is of its kind and it is sound and standalone (uploads, imports, the admin):
    a file that is both an ISO and a qcow2 naming a host file must never pass."""
    qemu_img = QemuImg()
    try:
        info = qemu_img.probe(path)
    except BackendError:  # what qemu-img said is logged: it may name host files
        raise ValidationError({"file": UNREADABLE}) from None
    if refusal := _kind_refusal(str(info["format"]), kind):
        raise ValidationError({"file": refusal})
    if kind == ImageKind.ISO:
        return _check_iso(path)
    if standalone_refusal(info, "qcow2"):
        raise ValidationError(
            {"file": "This qcow2 image depends on another file (a backing file or an external "
                     "data file): upload a standalone one (qemu-img convert -O qcow2 makes it)."}
        )  # fmt: skip
    virtual, cap = int(info["virtual-size"]), settings.ZOPDAY_IMAGE_MAX_VIRTUAL_GB
    if virtual > cap * GIB:
        raise ValidationError(
            {"file": f"Its virtual size is {_size(virtual)}; an image here is at most {cap} GiB."}
        )
    if problem := qemu_img.check(path):
        raise ValidationError({"file": problem})
    return max(1, math.ceil(virtual / GIB))


def _kind_refusal(found: str, kind: str) -> str:
    """Why a file whose header says `found` is not of `kind` ("" when it may be)."""
    if kind == ImageKind.ISO and found != "raw":
        return f"This file is {FORMAT_NAMES[found]}, not an ISO: upload a qcow2 image or an ISO."
    if kind == ImageKind.QCOW2 and found == "raw":
        return (
            "This file is not a qcow2 image: upload a standalone qcow2 cloud image, or convert "
            "one with qemu-img convert -O qcow2."
        )
    if kind == ImageKind.QCOW2 and found != "qcow2":
        return (
            f"This file is {FORMAT_NAMES[found]}, not a qcow2 image: upload a qcow2 image or an "
            "ISO (qemu-img convert -O qcow2 makes one)."
        )
    return ""


def _check_iso(path: Path) -> int:
    iso = pycdlib.PyCdlib()
    try:
        iso.open(str(path))
    except pycdlib.pycdlibexception.PyCdlibException as error:
        raise ValidationError({"file": f"This is not an ISO 9660 image ({error})."}) from None
    iso.close()
    return 1
