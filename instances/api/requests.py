"""The services' requests built from API bodies (and from manifests, which use the same shapes).

Ids in a body become the project's objects; an id that names nothing the project may use is an
error on its field, worded like the services' own, reported with every other mistake at once.
"""

from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet

from instances.api.lookups import CHOOSE_IMAGE, images_of
from instances.api.schemas import InstanceIn
from instances.models import Project, Subnet
from instances.selectors import chosen
from instances.services.instances import (
    DiskRequest,
    InstanceRequest,
    NicRequest,
    instance_request_check,
)
from instances.services.network import CHOOSE_SUBNET

M = TypeVar("M", bound=models.Model)

CHOOSE_KEYS = "Choose SSH keys of this project."


def instance_request(project: Project, payload: InstanceIn) -> InstanceRequest:
    errors: dict[str, str] = {}
    images = images_of(project)

    def pick(queryset: QuerySet[M], pk: int, field: str, message: str) -> Any:
        try:
            return chosen(queryset, pk, field, message)
        except ValidationError as error:
            errors.update({key: messages[0] for key, messages in error.message_dict.items()})
            return None

    root_image = (
        pick(images, payload.root_image, "root_image", CHOOSE_IMAGE)
        if payload.root_image is not None
        else None
    )
    keys = list(project.ssh_keys.filter(pk__in=payload.ssh_keys))
    if len(keys) != len(set(payload.ssh_keys)):
        errors["ssh_keys"] = CHOOSE_KEYS
    disks = [
        DiskRequest(
            size_gb=disk.size_gb,
            role=disk.role,
            image=(
                pick(images, disk.image, f"disks-{number}-image", CHOOSE_IMAGE)
                if disk.image is not None
                else None
            ),
            bus=disk.bus,
            name=disk.name,
            boot_order=disk.boot_order,
        )
        for number, disk in enumerate(payload.disks)
    ]
    nics = [
        NicRequest(  # a subnet not found: an unsaved one, of no project, refused as such
            subnet=pick(project.subnets.all(), nic.subnet, f"nics-{index}-subnet", CHOOSE_SUBNET)
            or Subnet(),
            ipv4=nic.ipv4,
            ipv6=nic.ipv6,
            mac=nic.mac,
            model=nic.model,
        )
        for index, nic in enumerate(payload.nics)
    ]
    fields = payload.model_dump(exclude={"root_image", "ssh_keys", "disks", "nics"})
    request = InstanceRequest(
        **fields, root_image=root_image, ssh_keys=keys, disks=disks, nics=nics
    )
    found = {key: [message] for key, message in errors.items()}
    if found:  # the rest of the request checked too, each part alone
        try:
            instance_request_check(project=project, request=request)
        except ValidationError as others:
            raise ValidationError(others.message_dict | found) from None
        raise ValidationError(found)
    return request
