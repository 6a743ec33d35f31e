"""The API's export of an instance: its `kubevirt.io/v1` VirtualMachine with what it needs, as
YAML that `kubectl apply -f` and `manage.py apply -f` take. Here rather than in instances.api,
which the manifests build on."""

from django.http import Http404, HttpRequest, HttpResponse
from ninja import Router

from instances.access import object_for_user, project_for_user
from instances.api.auth import request_user
from instances.api.errors import ERRORS
from instances.api.schemas import Id, Slug
from instances.choices import Role
from instances.manifests.export import object_manifest, project_manifest
from instances.manifests.vm_export import instance_manifest
from instances.models import Instance

router = Router(tags=["instances"])

YAML = "application/yaml"
MANIFEST_RESPONSE = {
    "description": "NetworkAttachmentDefinitions, the NoCloud Secret and the VirtualMachine, "
    "as one multi-document YAML stream; the user data only for the project's admins.",
    "content": {YAML: {"schema": {"type": "string"}}},
}
DOCUMENTS_RESPONSE = {
    "description": "The console's own documents (kind, project, name, spec), as one "
    "multi-document YAML stream.",
    "content": {YAML: {"schema": {"type": "string"}}},
}


@router.get(
    "/projects/{slug}/instances/{instance_id}/manifest",
    response=ERRORS,
    openapi_extra={"responses": {"200": MANIFEST_RESPONSE}},
)
def instance_manifest_get(request: HttpRequest, slug: Slug, instance_id: Id) -> HttpResponse:
    """The instance as KubeVirt objects. For operators and viewers the user data is redacted,
    and `manage.py apply` refuses the redacted export rather than erase it."""
    instance, role = object_for_user(
        Instance.objects.filter(project__slug=slug), request_user(request), pk=instance_id
    )
    text = instance_manifest(instance, redact=role != Role.ADMIN)
    return HttpResponse(text, content_type=YAML)


@router.get(
    "/projects/{slug}/manifests",
    response=ERRORS,
    openapi_extra={"responses": {"200": DOCUMENTS_RESPONSE}},
)
def project_manifests_get(request: HttpRequest, slug: Slug) -> HttpResponse:
    """Every object of the project as the console's documents, which `manage.py apply -f`
    takes back as no change; the user data's credentials only for the project's admins."""
    project, role = project_for_user(request_user(request), slug)
    return HttpResponse(project_manifest(project, redact=role != Role.ADMIN), content_type=YAML)


@router.get(
    "/projects/{slug}/manifests/{kind}/{name}",
    response=ERRORS,
    openapi_extra={"responses": {"200": DOCUMENTS_RESPONSE}},
)
def object_manifest_get(request: HttpRequest, slug: Slug, kind: str, name: str) -> HttpResponse:
    """One object (kind Subnet, SSHKey, Image, Disk, Instance, ElasticIP, ProvisioningJob) as
    its document."""
    project, role = project_for_user(request_user(request), slug)
    text = object_manifest(kind, project, name, redact=role != Role.ADMIN)
    if text is None:
        raise Http404(f"{project.slug} has no {kind} called {name}.")
    return HttpResponse(text, content_type=YAML)
