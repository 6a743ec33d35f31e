"""Finding what a request names, through instances.access: another project's object is 404, a
role too low for the action is 403. Ids inside a body that name nothing the project may use are
field errors (422) worded like the services' own."""

from typing import TypeVar

from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from instances.access import object_for_user, project_for_user
from instances.api.auth import request_user
from instances.choices import Role
from instances.models import Image, Project

M = TypeVar("M", bound=models.Model)

CHOOSE_IMAGE = "Choose an image of this project or a shared one."


def project_for(
    request: HttpRequest, slug: str, required: Role = Role.VIEWER
) -> tuple[Project, Role]:
    return project_for_user(request_user(request), slug, required)


def object_for(
    source: type[M] | QuerySet[M],
    request: HttpRequest,
    slug: str,
    pk: int,
    required: Role = Role.VIEWER,
) -> M:
    """The object `pk` (of a model, or of a queryset) of project `slug`, checked like its
    project."""
    queryset = source._default_manager.all() if isinstance(source, type) else source
    obj, _ = object_for_user(
        queryset.filter(project__slug=slug), request_user(request), required, pk=pk
    )
    return obj


def images_of(project: Project) -> QuerySet[Image]:
    """The images a project may use: its own and the shared ones."""
    return Image.objects.filter(Q(project=None) | Q(project=project))
