"""The project's SSH key catalog."""

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import object_for, project_for
from instances.api.schemas import Id, Slug, SSHKeyIn, SSHKeyOut
from instances.choices import Role
from instances.models import SSHKey
from instances.services.keys import ssh_key_add, ssh_key_remove

router = Router(tags=["ssh keys"])


@router.get("/projects/{slug}/ssh-keys", response={200: list[SSHKeyOut], **ERRORS})
def ssh_key_list(request: HttpRequest, slug: Slug) -> list[SSHKey]:
    project, _ = project_for(request, slug)
    return list(project.ssh_keys.all())


@router.post("/projects/{slug}/ssh-keys", response={201: SSHKeyOut, **ERRORS})
def ssh_key_create(request: HttpRequest, slug: Slug, payload: SSHKeyIn) -> Status:
    project, _ = project_for(request, slug, Role.OPERATOR)
    key = ssh_key_add(
        project=project,
        actor=request_user(request),
        name=payload.name,
        public_key=payload.public_key,
    )
    return Status(201, key)


@router.get("/projects/{slug}/ssh-keys/{key_id}", response={200: SSHKeyOut, **ERRORS})
def ssh_key_get(request: HttpRequest, slug: Slug, key_id: Id) -> SSHKey:
    return object_for(SSHKey, request, slug, key_id)


@router.delete("/projects/{slug}/ssh-keys/{key_id}", response={204: None, **REFUSALS})
def ssh_key_delete(request: HttpRequest, slug: Slug, key_id: Id) -> Status:
    """Instances keep the key they were created with; new ones no longer get it."""
    key = object_for(SSHKey, request, slug, key_id, Role.OPERATOR)
    ssh_key_remove(key=key, actor=request_user(request))
    return Status(204, None)
