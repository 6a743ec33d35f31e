"""The objects a spec names: images, subnets and SSH keys of the document's project.

A manifest names them the way a person does (`subnet: backend`, `root_image: demo`) or by id
as the API does. Names become ids before the schema checks the spec, then ids become objects
through the API's own lookups, so an unknown name and a foreign id get the API's message.
"""

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from instances.api.lookups import CHOOSE_IMAGE, images_of
from instances.api.requests import CHOOSE_KEYS, CHOOSE_SUBNET
from instances.models import Project


def _id_of(queryset: QuerySet, name: str, message: str) -> int:
    ids = list(queryset.filter(name=name).values_list("pk", flat=True)[:2])
    if not ids:
        raise ValidationError(message)
    if len(ids) > 1:
        raise ValidationError(f"Several are called {name}; give the id of the one you mean.")
    return ids[0]


def id_of(queryset: QuerySet, name: str, message: str) -> tuple[int | str, str]:
    """The id of the object called `name`, or the name back with why it was not found."""
    try:
        return _id_of(queryset, name, message), ""
    except ValidationError as error:
        return name, error.messages[0]


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
