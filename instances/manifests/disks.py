"""Free disks in manifests: the API's DiskCreateIn, the image by name. A disk an instance is
created with belongs in that instance's spec; here only its size can change (it grows)."""

from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.api.lookups import CHOOSE_IMAGE, images_of
from instances.api.schemas import DiskCreateIn
from instances.manifests.documents import Document
from instances.manifests.kinds import Kind
from instances.manifests.references import id_of
from instances.manifests.specs import fixed_problems, raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Disk, Project
from instances.selectors import chosen
from instances.services.storage import disk_create, disk_delete, disk_resize


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    raw, unknown = dict(document.spec), dict[str, str]()
    images = images_of(project)
    if isinstance(raw.get("image"), str):
        raw["image"], found = id_of(images, raw["image"], CHOOSE_IMAGE)
        unknown |= {"image": found} if found else {}
    spec = spec_checked(document, DiskCreateIn, raw, unknown)
    image = chosen(images, spec.image, "image", CHOOSE_IMAGE) if spec.image else None
    label = f"{project.slug}/{document.name}"
    disk = project.disks.filter(name=document.name).first()
    if disk is None:
        plan = Plan(document, label, "create")
        source = f", image {image.name}" if image else ""
        plan.lines.append(f"+ {spec.size_gb} GB in {spec.zone} ({spec.role}{source})")
        fields = spec.model_dump(exclude={"image"})
        run = partial(disk_create, project=project, actor=actor, image=image, **fields)
        plan.steps.append(Step(run))
        return plan
    raise_if(
        fixed_problems(
            document,
            "disk",
            {
                "zone": (disk.zone, spec.zone),
                "role": (disk.role, spec.role),
                "bus": (disk.bus, spec.bus),
                "image": (disk.image, image),
            },
        )
    )
    plan = Plan(document, label)
    if disk.size_gb != spec.size_gb:
        plan.verb = "change"
        plan.lines.append(f"~ size {disk.size_gb} GB -> {spec.size_gb} GB")
        resize = partial(disk_resize, disk=disk, actor=actor, size_gb=spec.size_gb)
        plan.steps.append(Step(resize, path="size_gb"))
    return plan


def _spec(disk: Disk, redact: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"zone": disk.zone, "size_gb": disk.size_gb, "bus": disk.bus}
    if disk.image is not None:
        spec["image"] = disk.image.name
    spec["role"] = disk.role
    return spec


def _delete(disk: Disk, actor: AbstractBaseUser, force: bool) -> None:
    disk_delete(disk=disk, actor=actor)


DISK = Kind(
    name="Disk",
    order=40,
    plan=_plan,
    find=lambda project, name: project.disks.filter(name=name).first(),
    # an attached disk is written in its instance's spec
    objects=lambda project: project.disks.filter(instance=None).order_by("name"),
    spec_of=_spec,
    delete=_delete,
)
