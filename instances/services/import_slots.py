"""Which of a project's queued URL imports go to the import workers now: at most
ZOPDAY_IMPORTS_PER_PROJECT of a project download at once; its others wait, oldest first, and
go when one ends (a cancel, a failure, a landing, or the sweep of a dead worker's import)."""

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from instances.choices import ImportStatus
from instances.models import ImageImport, Project
from instances.services.queueing import send_on_commit

TASK = "instances.image_import"
# holding a slot: downloading, or sent to the workers and not claimed yet
BUSY = Q(status__in=(ImportStatus.RUNNING, ImportStatus.CANCELLING)) | Q(
    status=ImportStatus.QUEUED, sent_at__isnull=False
)
WAITING = Q(status=ImportStatus.QUEUED, sent_at__isnull=True)


def import_queue() -> str:
    """The import workers' queue of this host (which holds the images folder): imports never
    take the threads of its host work (power operations)."""
    return f"imports.{settings.ZOPDAY_HOST}"


def image_imports_dispatch(project_id: int) -> None:
    """Send the project's waiting imports that fit in its free slots, oldest first."""
    with transaction.atomic():
        # under the project's lock: two imports ending at once never both take the last slot
        Project.objects.select_for_update().filter(pk=project_id).first()
        imports = ImageImport.objects.filter(project_id=project_id)
        free = settings.ZOPDAY_IMPORTS_PER_PROJECT - imports.filter(BUSY).count()
        if free <= 0:
            return
        for pk, attempt in (
            imports.filter(WAITING).order_by("created_at", "pk").values_list("pk", "attempt")[:free]
        ):
            ImageImport.objects.filter(pk=pk, attempt=attempt).update(sent_at=timezone.now())
            send_on_commit(TASK, pk, attempt, queue=import_queue())


def image_imports_dispatch_all() -> None:
    """Every project with waiting imports (a worker that died before it sent the next)."""
    for project_id in set(ImageImport.objects.filter(WAITING).values_list("project_id", flat=True)):
        image_imports_dispatch(project_id)
