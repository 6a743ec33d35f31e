"""Container disk images: registered by their OCI reference, pulled by the host's worker at the
first start of an instance that uses one."""

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS
from instances.api.lookups import project_for
from instances.api.schemas import ImageOut, Slug
from instances.api.schemas.base import In, Text
from instances.choices import OsType, Role
from instances.services.container_disks import container_image_add

router = Router(tags=["images"])


class ContainerImageIn(In):
    name: Text
    reference: Text  # registry/repository:tag or registry/repository@sha256:<digest>
    os_type: OsType = OsType.LINUX
    description: Text = ""


@router.post("/projects/{slug}/container-images", response={201: ImageOut, **ERRORS})
def container_image_create(request: HttpRequest, slug: Slug, body: ContainerImageIn) -> Status:
    """A container disk image (KubeVirt's containerDisk layout: /disk/<name>.qcow2 or .img in a
    layer). 422 says what to fix in the reference; the registry is asked at the first start."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    image = container_image_add(
        project=project, actor=request_user(request), name=body.name,
        reference=body.reference, os_type=body.os_type, description=body.description,
    )  # fmt: skip
    return Status(201, image)
