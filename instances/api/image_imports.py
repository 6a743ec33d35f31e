"""Imports of images from a URL: start one, follow its progress, cancel it."""

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import object_for, project_for
from instances.api.schemas import Id, Slug
from instances.api.schemas.image_imports import ImageImportIn, ImageImportOut
from instances.choices import Role
from instances.models import ImageImport
from instances.services import image_imports

router = Router(tags=["images"])


@router.post("/projects/{slug}/image-imports", response={201: ImageImportOut, **ERRORS})
def image_import_start(request: HttpRequest, slug: Slug, body: ImageImportIn) -> Status:
    """Fetch a qcow2, raw or ISO image over HTTP(S) in a worker and register it, checked as
    uploads are. The address is asked at once: a wrong one, or a size over the cap or the
    quota, is a 422 at `url`; later failures show in the import's `message`."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    image_import = image_imports.image_import_start(
        project=project, actor=request_user(request), **body.dict()
    )
    return Status(201, image_import)


@router.get("/projects/{slug}/image-imports", response={200: list[ImageImportOut], **ERRORS})
def image_import_list(request: HttpRequest, slug: Slug) -> list[ImageImport]:
    project, _ = project_for(request, slug)
    return list(ImageImport.objects.filter(project=project))


@router.get("/projects/{slug}/image-imports/{import_id}", response={200: ImageImportOut, **ERRORS})
def image_import_detail(request: HttpRequest, slug: Slug, import_id: Id) -> ImageImport:
    """Its status and progress: bytes done, bytes in all (when the server said), rate."""
    return object_for(ImageImport, request, slug, import_id)


@router.post(
    "/projects/{slug}/image-imports/{import_id}/cancel",
    response={202: ImageImportOut, **REFUSALS},
)
def image_import_cancel(request: HttpRequest, slug: Slug, import_id: Id) -> Status:
    """Stop a queued or running import; nothing of it is kept. 409 once it has ended."""
    image_import = object_for(ImageImport, request, slug, import_id, Role.OPERATOR)
    image_imports.image_import_cancel(image_import=image_import, actor=request_user(request))
    return Status(202, image_import)
