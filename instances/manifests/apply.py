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
    """Run every plan's steps in one transaction.

    1. Each document runs in a savepoint of its own: when a service refuses a step, the rest
       of that document is skipped, and the other documents still run, so that one run reports
       the problems of all of them.
    2. Any problem, or a dry run, rolls the whole transaction back: no rows, no audit events,
       no queued tasks. Problems are raised as ManifestInvalid.
    3. Otherwise it commits, and the queued work (starting instances, hot-plugging disks, ...)
       goes to the hosts' queues.
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
