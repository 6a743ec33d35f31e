"""Container disks on the worker: resolve each to a digest (pulled into the host's cache where
this console runs the instance), pin that digest on the disk, and keep registry logins."""

from dataclasses import replace

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from instances import actions
from instances.access import project_role
from instances.backends.base import BackendError
from instances.choices import ImageKind, OsType
from instances.containerdisks import cache
from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import REGISTRY, Reference, parse_reference
from instances.containerdisks.skopeo import Access, plain_http
from instances.models import Disk, Image, Instance, Project, RegistryCredential
from instances.services.audit import audit_record

PROBE_SECONDS = 15.0  # a registry's answer to one manifest request, while the user waits


def registry_access(project: Project, reference: Reference) -> Access:
    """How the project reaches the reference's registry: its login there, if it has one."""
    login = RegistryCredential.objects.filter(project=project, registry=reference.registry).first()
    return Access(
        insecure=plain_http(reference.registry),
        username=login.username if login else "",
        password=login.password if login else "",
    )


def container_disks_ready(instance: Instance, *, pull: bool) -> None:
    """Each container disk of the instance resolved to the digest it runs (pinned at its first
    pull), and with `pull` in the shared cache. Raises BackendError naming the disk."""
    disks = instance.disks.filter(image__kind=ImageKind.CONTAINER).select_related("image")
    for disk in disks:
        digest = container_disk_digest(disk, pull=pull)
        if digest != disk.digest:
            Disk.objects.filter(pk=disk.pk).update(digest=digest)


def container_disk_digest(disk: Disk, *, pull: bool) -> str:
    try:
        reference = parse_reference(disk.image.reference if disk.image else "")
        access = registry_access(disk.project, reference)
        if pull:
            return cache.pull(reference, access, expected=disk.digest).digest
        digest, _ = cache.resolve(reference, access)
        cache.require_unmoved(reference, disk.digest, digest)
        return digest
    except ContainerDiskError as error:
        raise BackendError(f"{disk.name}: {error.message}", retryable=error.retryable) from None


def registry_problem(project: Project, reference: Reference) -> str:
    """What the registry says against registering the reference ("" when nothing): an unknown
    host, a refused login, no such image, no layer, a layer over the cap. Only its manifest is
    read, with a short timeout; the layers are pulled by the worker at the first start."""
    access = replace(registry_access(project, reference), timeout=PROBE_SECONDS)
    try:
        _, manifest = cache.resolve(reference, access)
        cache.check_layers(reference, manifest)
    except ContainerDiskError as error:
        return error.message
    return ""


def container_image_add(
    *, project: Project, actor: AbstractBaseUser, name: str, reference: str,
    os_type: str = OsType.LINUX, description: str = "",
) -> Image:  # fmt: skip
    """Register a container disk image by its OCI reference, once its registry serves it; the
    layers are not pulled here (a web request): the host's worker pulls them at the first start
    of an instance that uses it."""
    actions.require(actions.manage(project_role(actor, project)))
    name, errors = name.strip(), {}
    try:
        parsed = parse_reference(reference)
    except ContainerDiskError as error:
        errors["reference"] = error.message
    else:
        reference = str(parsed)
        if problem := registry_problem(project, parsed):
            errors["reference"] = problem
    if not name:
        errors["name"] = "Give the image a name."
    elif Image.objects.filter(Q(project=project) | Q(project=None), name=name).exists():
        errors["name"] = f"An image called {name} exists already: choose another name."
    if os_type not in OsType.values:
        errors["os_type"] = f"Choose one of: {', '.join(OsType.values)}."
    image = Image(project=project, name=name, kind=ImageKind.CONTAINER, os_type=os_type,
                  reference=reference, description=description.strip())  # fmt: skip
    try:
        image.full_clean(exclude=["path", *errors])
    except ValidationError as error:
        errors |= {key: messages[0] for key, messages in error.message_dict.items()}
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        image.save()
        audit_record(actor=actor, action="image.add", project=project, target=image,
                     detail={"reference": reference})  # fmt: skip
    return image


def registry_credential_set(
    *, project: Project, actor: AbstractBaseUser, registry: str, username: str, password: str
) -> RegistryCredential:
    """Add or replace the project's login to a registry (the password stored encrypted)."""
    actions.require(actions.manage(project_role(actor, project)))
    registry = registry.strip().lower()
    errors = {}
    if not REGISTRY.match(registry):
        errors["registry"] = "Give the registry's host name and port, as references name it."
    if not username.strip():
        errors["username"] = "Give the user name (or token name) the registry knows."
    if not password:
        errors["password"] = "Give the password or access token."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        login, _ = RegistryCredential.objects.get_or_create(
            project=project, registry=registry, defaults={"username": username.strip()}
        )
        login.username = username.strip()
        login.password = password
        login.save()
        audit_record(
            actor=actor,
            action="registry_credential.set",
            project=project,
            target=login,
            detail={"registry": registry, "username": login.username},
        )
    return login
