"""Declarative manifests: `manage.py apply -f instance.yaml` creates or updates instances.

One instance per YAML document: `kind: Instance`, `project`, `name` and `spec` (the API's
InstanceIn fields, names allowed for references). Reading (documents), planning (plans, diffs)
and applying (apply) are separate, so `--dry-run` shows the same diff and problems.
"""

from django.contrib.auth.models import AbstractBaseUser

from instances.manifests.apply import plans_apply
from instances.manifests.documents import documents_read
from instances.manifests.errors import ManifestInvalid, Problem
from instances.manifests.plans import plans_make
from instances.manifests.steps import Plan

__all__ = ["ManifestInvalid", "Plan", "Problem", "manifest_apply"]


def manifest_apply(
    *, sources: list[tuple[str, str]], actor: AbstractBaseUser, dry_run: bool = False
) -> list[Plan]:
    """Apply the manifests, given as (file name, text): every document is read and planned
    before anything runs, and either every change is kept or none (always none for a dry run).
    Raises ManifestInvalid with every problem found."""
    documents = documents_read(sources=sources)
    plans = plans_make(documents=documents, actor=actor)
    plans_apply(plans=plans, dry_run=dry_run)
    return plans
