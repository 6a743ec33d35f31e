"""Applying plans through the services, all documents or none.

Dry runs go through the very same calls and are rolled back, so they find everything a real
run would (a MAC already in use, a disk that cannot shrink, an instance that must be stopped
first) and still leave nothing behind. That holds because every service writes only to the
database and queues its background work with transaction.on_commit (house rule 3): a rollback
discards both. The only trace is on PostgreSQL, where the ids a dry run used are skipped.
"""

from django.core.exceptions import ValidationError
from django.db import transaction

from instances.errors import ActionRefused
from instances.manifests.errors import ManifestInvalid, Problem
from instances.manifests.steps import Plan


def plans_apply(*, plans: list[Plan], dry_run: bool) -> None:
    """Run every plan's steps in one transaction, each document in its own savepoint so that a
    refused step skips only the rest of its document and one run reports every problem. Any
    problem (raised as ManifestInvalid) or a dry run rolls it all back, queued tasks included.
    """
    problems: list[Problem] = []
    with transaction.atomic():
        for plan in plans:
            try:
                with transaction.atomic():
                    _run(plan)
            except ManifestInvalid as invalid:
                problems += invalid.problems
        if problems or dry_run:
            transaction.set_rollback(True)
    if problems:
        raise ManifestInvalid(problems)


def _run(plan: Plan) -> None:
    """The plan's steps in order; the first one a service refuses ends the plan."""
    for step in plan.steps:
        try:
            step.run()
        except (ValidationError, ActionRefused) as error:
            raise ManifestInvalid(step.problems(error, plan.document.where)) from error
