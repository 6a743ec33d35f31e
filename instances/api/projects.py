"""Projects the caller is a member of, and the images a project can boot from."""

from django.http import HttpRequest
from ninja import Router

from instances import selectors
from instances.api.auth import request_user
from instances.api.errors import ERRORS
from instances.api.lookups import images_of, project_for
from instances.api.schemas import ImageOut, ProjectOut, Slug
from instances.choices import Role
from instances.models import Image, Membership

router = Router(tags=["projects"])


@router.get("/projects", response={200: list[ProjectOut], **ERRORS})
def project_list(request: HttpRequest) -> list[dict]:
    user = request_user(request)
    roles = dict(Membership.objects.filter(user_id=user.pk).values_list("project_id", "role"))
    admin = getattr(user, "is_superuser", False)
    return [
        {**_project(project), "role": Role.ADMIN if admin else roles[project.pk]}
        for project in selectors.projects_for_user(user)
    ]


@router.get("/projects/{slug}", response={200: ProjectOut, **ERRORS})
def project_get(request: HttpRequest, slug: Slug) -> dict:
    project, role = project_for(request, slug)
    return {**_project(project), "role": role}


@router.get("/projects/{slug}/images", response={200: list[ImageOut], **ERRORS})
def image_list(request: HttpRequest, slug: Slug) -> list[Image]:
    """The project's own images and the ones shared with every project."""
    project, _ = project_for(request, slug)
    return list(images_of(project))


def _project(project: object) -> dict:
    return {name: getattr(project, name) for name in ("slug", "name", "description")}
