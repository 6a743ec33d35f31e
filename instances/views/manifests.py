"""The instance page's Export YAML: its VirtualMachine manifest, as a download."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from instances.access import instance_for_user
from instances.choices import Role
from instances.http import AuthedRequest
from instances.manifests.vm_export import instance_manifest


@require_GET
@login_required
def instance_manifest_download(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """Every member may export; the user data's credentials only reach the project's admins."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    text = instance_manifest(instance, redact=role != Role.ADMIN)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{instance.name}.yaml"'
    return response
