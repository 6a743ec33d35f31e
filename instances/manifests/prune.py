"""What apply manages, and pruning: the objects of a project that apply made or took over
(ManagedObject rows, by the object's id) and that the manifests no longer declare are deleted
through their services; anything the console or the API made is never touched, not even an
object made by hand under the name of one apply made and someone deleted since."""

from functools import partial

from django.contrib.auth.models import AbstractBaseUser

from instances.manifests.documents import Document, kind_label
from instances.manifests.kinds import KINDS
from instances.manifests.steps import Plan, Step
from instances.models import ManagedObject, Project


def managed_mark(project: Project, kind: str, name: str) -> None:
    """Apply manages this object from now on (kept only if the run is); its id too, for a kind
    whose objects have no name of their own."""
    found = KINDS[kind].find(project, name)
    ManagedObject.objects.update_or_create(
        project=project, kind=kind, name=name,
        defaults={"object_id": found.pk if found is not None else None},
    )  # fmt: skip


def prune_plans(
    *,
    projects: list[Project],
    declared: set[tuple[str, str]],
    actor: AbstractBaseUser,
    force: bool,
) -> list[Plan]:
    """A delete plan for each managed object not declared, the kinds others name last."""
    rows = [
        row
        for row in ManagedObject.objects.filter(project__in=projects).select_related("project")
        if (row.kind, row.name) not in declared and row.kind in KINDS
    ]
    rows.sort(key=lambda row: (-KINDS[row.kind].order, row.project.slug, row.name))
    plans = []
    for row in rows:
        kind = KINDS[row.kind]
        label = f"{row.project.slug}/{row.name}"
        where = f"prune ({kind_label(row.kind)} {label})"
        plan = Plan(Document(where, row.project.slug, row.name, {}, row.kind), label, "delete")
        found = kind.find(row.project, row.name)
        if found is not None and found.pk == row.object_id:
            plan.steps.append(Step(partial(kind.delete, found, actor, force)))
        elif found is not None:  # apply's object went, and someone made another of its name
            plan.lines.append("  not the one apply made (that one is gone): left alone")
        else:
            plan.lines.append("  gone already: only apply's record of it goes")
        plan.steps.append(Step(partial(ManagedObject.objects.filter(pk=row.pk).delete)))
        plans.append(plan)
    return plans
