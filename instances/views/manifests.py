"""Export YAML on the pages: an instance's VirtualMachine manifest, and the console's own
documents of a project or of one object, as downloads."""

import re

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from instances.access import instance_for_user, project_for_user
from instances.choices import Role
from instances.http import AuthedRequest
from instances.manifests import object_manifest, project_manifest
from instances.manifests.vm_export import instance_manifest

# a name stored before names were checked may hold a quote, a separator or a line break
UNSAFE_IN_FILE_NAMES = re.compile(r'["/\\\x00-\x1f\x7f]+')


@require_GET
@login_required
def instance_manifest_download(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """Every member may export; the user data's credentials only reach the project's admins."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    text = instance_manifest(instance, redact=role != Role.ADMIN)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{instance.name}.yaml"'
    return response


@require_GET
@login_required
def project_manifest_download(
    request: AuthedRequest, project_slug: str, kind: str = "", name: str = ""
) -> HttpResponse:
    """The project, or one object of it, as the documents `manage.py apply -f` takes back;
    every member may export, the user data's credentials only reach the project's admins."""
    project, role = project_for_user(request.user, project_slug)
    redact = role != Role.ADMIN
    if kind:
        text = object_manifest(kind, project, name, redact=redact)
        if text is None:
            raise Http404(f"{project.slug} has no {kind} called {name}.")
    else:
        text = project_manifest(project, redact=redact)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    filename = f"{project.slug}-{UNSAFE_IN_FILE_NAMES.sub('-', name)}" if kind else project.slug
    response["Content-Disposition"] = f'attachment; filename="{filename}.yaml"'
    return response
