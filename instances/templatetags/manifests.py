"""`{% manifest_url project "SSHKey" key %}`: the download of one object as its manifest
document, named the way the export names it (an Elastic IP apply made by its document's name)."""

from typing import Any

from django import template
from django.urls import reverse

from instances.manifests.kinds import KINDS
from instances.models import Project

register = template.Library()


@register.simple_tag
def manifest_url(project: Project, kind: str, obj: Any) -> str:
    return reverse("object-manifest", args=[project.slug, kind, KINDS[kind].name_of(obj)])
