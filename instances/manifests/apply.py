"""Applying documents through the services, all of them or none.

Each document is planned and run in turn, in kind order (subnets, keys and images before the
instances that name them), so a reference by name finds an object made by an earlier document
of the same run. All of it is one transaction, each document in its own savepoint, so a refused
document skips only itself and one run reports every problem; any problem, or a dry run, rolls
it all back. That holds because every service writes only to the database and queues its
background work with transaction.on_commit (house rule 3): a rollback discards both.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404

from instances.access import project_for_user
from instances.choices import Role
from instances.errors import ActionRefused
from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, Problem, service_problems
from instances.manifests.kinds import KINDS, unknown_kind_message
from instances.manifests.knock_on import Failed, knock_on_explained
from instances.manifests.prune import managed_mark, prune_plans
from instances.manifests.steps import Plan
from instances.models import Project


def documents_apply(
    *,
    documents: list[Document],
    actor: AbstractBaseUser,
    dry_run: bool,
    prune: bool = False,
    force: bool = False,
    projects: tuple[str, ...] = (),
) -> list[Plan]:
    """Plan and run every document; with `prune`, then remove what apply manages in their
    projects (and in `projects`) that they no longer declare. Raises ManifestInvalid."""
    problems: list[Problem] = []
    plans: list[Plan] = []
    touched: dict[int, Project] = {}
    failed: Failed = {}  # documents that failed to make their object, for knock-on problems
    known = [document for document in documents if document.kind in KINDS]
    for document in documents:
        if document.kind not in KINDS:
            problems.append(Problem(document.at("kind"), "kind", unknown_kind_message()))
    known.sort(key=lambda document: KINDS[document.kind].order)
    with transaction.atomic():
        for slug in projects:
            named = _project(Document(slug, slug, "", {}), actor)
            touched[named.pk] = named
        for document in known:
            project: Project | None = None
            try:
                with transaction.atomic():
                    project = _project(document, actor)
                    touched[project.pk] = project
                    plan = _planned(document, project, actor)
                    plans.append(plan)
                    run(plan)
                    managed_mark(project, document.kind, document.name)
            except ManifestInvalid as invalid:
                found = document.located(invalid.problems)
                problems += knock_on_explained(document, found, failed)
                if project and KINDS[document.kind].find(project, document.name) is None:
                    failed[(document.kind, document.project, document.name)] = document.where
        if prune and not problems:
            declared = {(plan.document.kind, plan.document.name) for plan in plans}
            for plan in prune_plans(projects=list(touched.values()), declared=declared,
                                    actor=actor, force=force):  # fmt: skip
                try:
                    with transaction.atomic():
                        run(plan)
                except ManifestInvalid as invalid:
                    problems += invalid.problems
                plans.append(plan)
        if problems or dry_run:
            transaction.set_rollback(True)
    if problems:
        raise ManifestInvalid(problems)
    return plans


def _project(document: Document, actor: AbstractBaseUser) -> Project:
    try:
        project, _ = project_for_user(actor, document.project, Role.OPERATOR)
    except (Http404, PermissionDenied) as error:
        raise ManifestInvalid([Problem(document.where, "project", str(error))]) from None
    return project


def _planned(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    """The document's plan; a lookup refused while planning (an id not found) is a problem."""
    try:
        return KINDS[document.kind].plan(document, project, actor)
    except (ValidationError, ActionRefused) as error:
        raise ManifestInvalid(service_problems(error, document.where)) from error


def run(plan: Plan) -> None:
    """The plan's steps in order; the first one a service refuses ends the plan."""
    for step in plan.steps:
        try:
            step.run()
        except (ValidationError, ActionRefused) as error:
            raise ManifestInvalid(step.problems(error, plan.document.where)) from error
