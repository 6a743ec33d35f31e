"""What a project's images hold against ZOPDAY_PROJECT_IMAGE_QUOTA_GB: the uploaded files
stored, and the bytes held for imports under way (each holds its announced size, or what has
arrived so far), so imports running together never take the project past it."""

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from instances.backends.qemu.images import GIB
from instances.choices import ImportStatus
from instances.models import Image, ImageImport, Project

UPLOADS = "uploads"  # under the images directory: uploads/<project>/<id>.<kind>
UNDER_WAY = (ImportStatus.RUNNING, ImportStatus.CANCELLING)


def image_storage_used(project: Project) -> int:
    """Bytes the project's uploaded image files hold."""
    used = 0
    for path in Image.objects.filter(project=project).values_list("path", flat=True):
        if path.startswith(f"{UPLOADS}/"):
            file = settings.ZOPDAY_IMAGES_DIR / path
            used += file.stat().st_size if file.exists() else 0
    return used


def image_imports_held(project: Project, excluding: int | None = None) -> int:
    """Bytes held for the project's imports under way (but the one `excluding`)."""
    held = ImageImport.objects.filter(project=project, status__in=UNDER_WAY)
    if excluding is not None:
        held = held.exclude(pk=excluding)
    return int(held.aggregate(total=Sum("bytes_reserved"))["total"] or 0)


def quota_refusal(project: Project, size: int, excluding_import: int | None = None) -> str:
    """Why `size` more bytes do not fit in the project's quota ("" when they do)."""
    quota = int(settings.ZOPDAY_PROJECT_IMAGE_QUOTA_GB * GIB)
    stored = image_storage_used(project)
    held = image_imports_held(project, excluding_import)
    if stored + held + size <= quota:
        return ""
    importing = f" ({size_text(held)} of it held by imports under way)" if held else ""
    return (
        f"This file ({size_text(size)}) would take the project's images past their quota of "
        f"{size_text(quota)}: {size_text(stored + held)} are in use{importing}. Remove an "
        "image the project no longer needs."
    )


def image_import_hold(*, image_import: ImageImport, size: int, ahead: int = 0) -> tuple[int, str]:
    """Hold `size` bytes of the quota for an import under way (`ahead` more when they fit), under
    the project's lock: the bytes now held, and why not ("" when held). A refusal keeps what the
    import held, so no other import takes it between two tries."""
    mine = ImageImport.objects.filter(pk=image_import.pk)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=image_import.project_id).first()
        for wanted in (size + ahead, size) if ahead else (size,):
            message = quota_refusal(image_import.project, wanted, excluding_import=image_import.pk)
            if not message:
                mine.update(bytes_reserved=wanted)
                return wanted, ""
        return int(mine.values_list("bytes_reserved", flat=True).first() or 0), message


def size_text(size: int) -> str:
    """A size in the largest binary unit it fills (192.5 KiB, 1.0 PiB)."""
    units = ((1024**5, "PiB"), (1024**4, "TiB"), (GIB, "GiB"), (1024**2, "MiB"), (1024, "KiB"))
    for unit, name in units:
        if size >= unit:
            return f"{size / unit:.1f} {name}"
    return f"{size} B"
