"""The images a project can boot from: list them, upload a qcow2 cloud image or an ISO of the
project's own, remove one."""

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import File, Form, Router, UploadedFile
from ninja.responses import Status

from instances.api.auth import request_user, role_first_auth
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import images_of, object_for, project_for
from instances.api.schemas import Id, ImageOut, Slug
from instances.choices import OsType, Role
from instances.models import Image
from instances.services import images

router = Router(tags=["images"])


@router.get("/projects/{slug}/images", response={200: list[ImageOut], **ERRORS})
def image_list(request: HttpRequest, slug: Slug) -> list[Image]:
    """The project's own images and the ones shared with every project."""
    project, _ = project_for(request, slug)
    return list(images_of(project))


@router.get("/projects/{slug}/images/{image_id}", response={200: ImageOut, **ERRORS})
def image_get(request: HttpRequest, slug: Slug, image_id: Id) -> Image:
    """One of the project's own images or a shared one."""
    project, _ = project_for(request, slug)
    return get_object_or_404(images_of(project), pk=image_id)


@router.post(
    "/projects/{slug}/images",
    response={201: ImageOut, **ERRORS},
    auth=role_first_auth(Role.OPERATOR),  # a viewer's upload is refused before it is read
)
def image_upload(
    request: HttpRequest,
    slug: Slug,
    file: File[UploadedFile],
    name: Form[str],
    kind: Form[str],
    os_type: Form[str] = OsType.LINUX,
    description: Form[str] = "",
) -> Status:
    """multipart/form-data: `file`, `name`, `kind` (qcow2 or iso), optional `os_type` and
    `description`. A qcow2 image must be standalone (no backing or external data file) and
    sound; its virtual size becomes the image's minimum disk. 422 says what to fix."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    image = images.image_upload(
        project=project, actor=request_user(request), upload=file, name=name, kind=kind,
        os_type=os_type, description=description,
    )  # fmt: skip
    return Status(201, image)


@router.delete("/projects/{slug}/images/{image_id}", response={204: None, **REFUSALS})
def image_remove(request: HttpRequest, slug: Slug, image_id: Id) -> Status:
    """A project's own image; 409 while disks made from it exist."""
    image = object_for(Image, request, slug, image_id, Role.OPERATOR)
    images.image_remove(image=image, actor=request_user(request))
    return Status(204, None)
