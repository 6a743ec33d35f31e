"""Declarative manifests: `manage.py apply -f` makes a project's objects match YAML documents,
and `manage.py export` writes them.

One object per document: `kind` (Subnet, SSHKey, Image, Disk, Instance, ElasticIP, and
ProvisioningJob from the provisioning app), `project`, `name` and `spec` (the API's body of
that kind, names allowed for references). Kinds live in one registry (kinds); reading
(documents), applying (apply), pruning (prune) and exporting (export) are separate modules.
"""

from django.contrib.auth.models import AbstractBaseUser

from instances.manifests.apply import documents_apply
from instances.manifests.documents import documents_read
from instances.manifests.errors import ManifestInvalid, Problem
from instances.manifests.export import object_manifest, project_manifest
from instances.manifests.kinds import KINDS, unknown_kind_message
from instances.manifests.steps import Plan

__all__ = [
    "ManifestInvalid",
    "Plan",
    "Problem",
    "manifest_apply",
    "object_manifest",
    "project_manifest",
]


def manifest_apply(
    *,
    sources: list[tuple[str, str]],
    actor: AbstractBaseUser,
    dry_run: bool = False,
    prune: bool = False,
    force: bool = False,
    projects: tuple[str, ...] = (),
) -> list[Plan]:
    """Apply the manifests, given as (file name, text): either every change is kept or none
    (always none for a dry run). `prune` also removes the objects apply manages in the
    documents' projects (and in `projects`) that no document declares any more, a running
    instance only with `force`. Raises ManifestInvalid with every problem found."""
    documents = documents_read(sources=sources, kinds=KINDS, unknown_kind=unknown_kind_message())
    return documents_apply(
        documents=documents, actor=actor, dry_run=dry_run, prune=prune, force=force,
        projects=projects,
    )  # fmt: skip
