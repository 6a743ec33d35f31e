"""The kinds a manifest declares, in one registry: how each is planned, found, exported and
pruned. The provisioning app registers its own kind (ProvisioningJob) when it starts."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.manifests.documents import Document
from instances.manifests.steps import Plan
from instances.models import Project


@dataclass(frozen=True)
class Kind:
    """`order`: applied in rising order (what others name comes first), pruned in falling.
    `spec_of(obj, redact)` is the exported spec, which `plan` takes back as no change."""

    name: str
    order: int
    plan: Callable[[Document, Project, AbstractBaseUser], Plan]
    find: Callable[[Project, str], Any]
    objects: Callable[[Project], Iterable[Any]]
    spec_of: Callable[[Any, bool], dict[str, Any]]
    delete: Callable[[Any, AbstractBaseUser, bool], None]
    name_of: Callable[[Any], str] = lambda obj: str(obj.name)


KINDS: dict[str, Kind] = {}


def kind_register(kind: Kind) -> None:
    KINDS[kind.name] = kind


def kinds_in_order() -> list[Kind]:
    return sorted(KINDS.values(), key=lambda kind: kind.order)


def unknown_kind_message() -> str:
    return f"Give one of the kinds {', '.join(kind.name for kind in kinds_in_order())}."
