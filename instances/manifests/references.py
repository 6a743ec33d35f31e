"""The objects a spec names: images, subnets and SSH keys of the document's project.

A manifest names them the way a person does (`subnet: backend`, `root_image: demo`) or by id
as the API does. Names become ids before the schema checks the spec, then ids become objects
through the API's own lookups, so an unknown name and a foreign id get the API's message.
"""

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from instances.api.lookups import CHOOSE_IMAGE, chosen, images_of
from instances.manifests.schemas import InstanceSpec
from instances.models import Project
from instances.services.instances import DiskRequest, InstanceRequest, NicRequest

CHOOSE_SUBNET = "Choose a subnet of this project."
CHOOSE_KEYS = "Choose SSH keys of this project."


def _id_of(queryset: QuerySet, name: str, message: str) -> int:
    ids = list(queryset.filter(name=name).values_list("pk", flat=True)[:2])
    if not ids:
        raise ValidationError(message)
    if len(ids) > 1:
        raise ValidationError(f"Several are called {name}; give the id of the one you mean.")
    return ids[0]


def names_to_ids(spec: dict[str, Any], project: Project) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of the raw spec with every name replaced by its id, and the names that are not
    found keyed by field path. Values that are neither names nor ids are left to the schema."""
    spec = dict(spec)
    errors: dict[str, str] = {}
    images = images_of(project)

    def resolve(
        container: dict[str, Any], key: str, path: str, queryset: QuerySet, message: str
    ) -> None:
        value = container.get(key)
        if isinstance(value, str):
            try:
                container[key] = _id_of(queryset, value, message)
            except ValidationError as error:
                errors[path] = error.messages[0]

    resolve(spec, "root_image", "root_image", images, CHOOSE_IMAGE)
    if isinstance(spec.get("ssh_keys"), list):
        keys = spec["ssh_keys"] = list(spec["ssh_keys"])
        for number, key in enumerate(keys):
            if isinstance(key, str):
                try:
                    keys[number] = _id_of(project.ssh_keys.all(), key, CHOOSE_KEYS)
                except ValidationError as error:
                    errors["ssh_keys"] = error.messages[0]
    for field, reference, queryset, message in (
        ("disks", "image", images, CHOOSE_IMAGE),
        ("nics", "subnet", project.subnets.all(), CHOOSE_SUBNET),
    ):
        if not isinstance(spec.get(field), list):
            continue
        items = spec[field] = [
            dict(item) if isinstance(item, dict) else item for item in spec[field]
        ]
        for number, item in enumerate(items):
            if isinstance(item, dict):
                resolve(item, reference, f"{field}-{number}-{reference}", queryset, message)
    return spec, errors


def instance_request(project: Project, spec: InstanceSpec) -> InstanceRequest:
    """The services' request for a checked spec; ids the project may not use are field errors
    (all of them at once), worded like the API's."""
    errors: dict[str, str] = {}
    images = images_of(project)

    def pick(queryset: QuerySet, pk: int, field: str, message: str) -> Any:
        try:
            return chosen(queryset, pk, field, message)
        except ValidationError as error:
            errors.update({key: messages[0] for key, messages in error.message_dict.items()})
            return None

    root_image = pick(images, spec.root_image, "root_image", CHOOSE_IMAGE)
    keys = list(project.ssh_keys.filter(pk__in=spec.ssh_keys))
    if len(keys) != len(set(spec.ssh_keys)):
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
        for number, disk in enumerate(spec.disks)
    ]
    nics = [
        NicRequest(
            subnet=pick(project.subnets.all(), nic.subnet, f"nics-{index}-subnet", CHOOSE_SUBNET),
            ipv4=nic.ipv4,
            ipv6=nic.ipv6,
            mac=nic.mac,
            model=nic.model,
        )
        for index, nic in enumerate(spec.nics)
    ]
    if errors:
        raise ValidationError(errors)
    fields = spec.model_dump(include=set(INSTANCE_FIELDS))
    return InstanceRequest(**fields, root_image=root_image, ssh_keys=keys, disks=disks, nics=nics)


# The spec's plain fields, as InstanceRequest takes them.
INSTANCE_FIELDS = (
    "name",
    "zone",
    "root_size_gb",
    "root_bus",
    "run_strategy",
    "vcpus",
    "memory_gb",
    "sockets",
    "cores",
    "threads",
    "bootloader",
    "secure_boot",
    "persistent_efi",
    "vtpm",
    "user_data_mode",
    "custom_user_data",
)
