"""Drift: what was changed in the console since the last good sync, found by planning the
manifests that sync applied once more against the objects as they are now (a dry run).

Any line that plan holds is a field a manifest declares whose object no longer matches it (a
disk resized, a run strategy changed, an instance deleted: it plans a create). Fields the
manifests leave out, power state and objects they never declared are not drift.
"""

from django.contrib.auth.models import AbstractBaseUser

from instances.manifests import ManifestInvalid, manifest_apply


def drift_find(*, applied: list[tuple[str, str]], actor: AbstractBaseUser) -> list[str]:
    """The diff lines that would bring the objects back to what the last sync applied."""
    if not applied:
        return []
    try:
        plans = manifest_apply(sources=applied, actor=actor, dry_run=True)
    except ManifestInvalid as invalid:
        return [
            "The manifests last applied no longer apply as they stand:",
            *(f"    {problem}" for problem in invalid.problems),
        ]
    return [line for plan in plans if plan.verb != "unchanged" for line in plan.diff()]
