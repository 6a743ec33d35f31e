"""Images in manifests, imported from a URL: the API's ImageImportIn. A missing image starts an
import (the address is probed at once, as the API does); one imported, or under way, is left
as it is. Instances name an image only once its import is done."""

from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.api.schemas.image_imports import ImageImportIn
from instances.choices import IMPORT_TRANSITIONAL, ImageKind, ImportFormat
from instances.manifests.documents import Document
from instances.manifests.kinds import Kind
from instances.manifests.specs import fixed_problems, raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Image, ImageImport, Project
from instances.services.image_imports import image_import_start
from instances.services.images import image_remove
from instances.url_redaction import url_redacted

KIND_OF_FORMAT: dict[str, str] = {ImportFormat.RAW: ImageKind.QCOW2}  # raw imports as qcow2


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    spec = spec_checked(document, ImageImportIn)
    label = f"{project.slug}/{document.name}"
    image = project.images.filter(name=document.name.strip()).first()
    if image is not None:
        raise_if(
            fixed_problems(
                document,
                "image",
                {
                    "format": (image.kind, KIND_OF_FORMAT.get(spec.format, spec.format)),
                    "os_type": (image.os_type, spec.os_type),
                    "description": (image.description, spec.description.strip()),
                },
            )
        )
        return Plan(document, label)
    importing = ImageImport.objects.filter(
        project=project, name=document.name.strip(), status__in=IMPORT_TRANSITIONAL
    ).first()
    if importing is not None:
        plan = Plan(document, label)
        plan.lines.append(
            f"  importing from {importing.shown_url} ({importing.get_status_display()})"
        )
        return plan
    plan = Plan(document, label, "create")
    plan.lines.append(f"+ import {spec.format} from {url_redacted(spec.url)}")
    fields = spec.model_dump()
    plan.steps.append(Step(partial(image_import_start, project=project, actor=actor, **fields)))
    return plan


def _spec(image: Image, redact: bool) -> dict[str, Any]:
    source = ImageImport.objects.filter(image=image).order_by("-created_at").first()
    spec: dict[str, Any] = {
        "format": source.format if source else image.kind,
        "url": source.shown_url if source else "",  # an export never carries the login
    }
    if source and source.sha256:
        spec["sha256"] = source.sha256
    spec["os_type"] = image.os_type
    if image.description:
        spec["description"] = image.description
    return spec


def _delete(image: Image, actor: AbstractBaseUser, force: bool) -> None:
    image_remove(image=image, actor=actor)


IMAGE = Kind(
    name="Image",
    order=30,
    plan=_plan,
    find=lambda project, name: project.images.filter(name=name).first(),
    objects=lambda project: project.images.exclude(kind=ImageKind.CONTAINER).order_by("name"),
    spec_of=_spec,
    delete=_delete,
)
