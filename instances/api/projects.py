"""Projects the caller is a member of."""

from django.http import HttpRequest
from ninja import Router

from instances import selectors
from instances.api.auth import request_user
from instances.api.errors import ERRORS
from instances.api.lookups import project_for
from instances.api.schemas import ProjectOut, Slug
from instances.choices import Role
from instances.models import Membership

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


def _project(project: object) -> dict:
    return {name: getattr(project, name) for name in ("slug", "name", "description")}
