"""Instances: list, create, read, delete, power actions and the run strategy.

Power actions only claim the transition (the instance answers in its transitional state, 202);
the work runs on the instance's host once the request has committed.
"""

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Query, Router
from ninja.responses import Status

from instances import selectors
from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import object_for, project_for
from instances.api.requests import instance_request
from instances.api.schemas import (
    Id,
    InstanceDetailOut,
    InstanceFilters,
    InstanceIn,
    InstancePage,
    RunStrategyIn,
    Slug,
)
from instances.choices import Role
from instances.filters import InstanceFilterSet
from instances.models import Instance
from instances.power_operations import POWER_OPERATIONS, PowerOperation
from instances.services import power
from instances.services.instances import (
    instance_create,
    instance_delete,
    instance_set_run_strategy,
)

router = Router(tags=["instances"])

DETAIL = {200: InstanceDetailOut, **REFUSALS}


def _instances() -> QuerySet[Instance]:
    return Instance.objects.prefetch_related("ssh_keys", "disks", "nics")


@router.get("/projects/{slug}/instances", response={200: InstancePage, **ERRORS})
def instance_list(
    request: HttpRequest, slug: Slug, filters: Query[InstanceFilters]
) -> dict[str, object]:
    project, _ = project_for(request, slug)
    query = dict(state=filters.state, zone=filters.zone, subnet=filters.subnet, q=filters.search)
    instances = InstanceFilterSet(query, queryset=selectors.instance_list(project)).qs
    start = (filters.page - 1) * filters.page_size
    items = list(instances[start : start + filters.page_size])
    selectors.ssh_key_ids(items)
    return {
        "count": instances.count(),
        "page": filters.page,
        "page_size": filters.page_size,
        "items": items,
    }


@router.post("/projects/{slug}/instances", response={201: InstanceDetailOut, **REFUSALS})
def instance_add(request: HttpRequest, slug: Slug, payload: InstanceIn) -> Status:
    """Creates the instance with its disks and NICs, all or nothing; a run strategy of Always,
    RerunOnFailure or Once also starts it."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    wanted = instance_request(project, payload)  # ids the project lacks: with every mistake
    instance = instance_create(project=project, actor=request_user(request), request=wanted)
    return Status(201, _instances().get(pk=instance.pk))


@router.get("/projects/{slug}/instances/{instance_id}", response={200: InstanceDetailOut, **ERRORS})
def instance_get(request: HttpRequest, slug: Slug, instance_id: Id) -> Instance:
    return object_for(_instances(), request, slug, instance_id)


@router.delete("/projects/{slug}/instances/{instance_id}", response={204: None, **REFUSALS})
def instance_remove(request: HttpRequest, slug: Slug, instance_id: Id) -> Status:
    """Admins only, and only when stopped; secondary disks stay, detached."""
    instance = object_for(Instance, request, slug, instance_id, Role.ADMIN)
    instance_delete(instance=instance, actor=request_user(request))
    return Status(204, None)


@router.patch("/projects/{slug}/instances/{instance_id}", response=DETAIL)
def instance_update(
    request: HttpRequest, slug: Slug, instance_id: Id, payload: RunStrategyIn
) -> Instance:
    """Only the run strategy can change; it applies at once (Always starts, Halted stops)."""
    return _set_run_strategy(request, slug, instance_id, payload)


@router.post("/projects/{slug}/instances/{instance_id}/run-strategy", response=DETAIL)
def instance_run_strategy(
    request: HttpRequest, slug: Slug, instance_id: Id, payload: RunStrategyIn
) -> Instance:
    """The same as PATCH on the instance, for clients that only POST."""
    return _set_run_strategy(request, slug, instance_id, payload)


def _set_run_strategy(
    request: HttpRequest, slug: str, instance_id: int, payload: RunStrategyIn
) -> Instance:
    instance = object_for(Instance, request, slug, instance_id, Role.OPERATOR)
    instance_set_run_strategy(
        instance=instance, actor=request_user(request), strategy=payload.run_strategy
    )
    return _instances().get(pk=instance.pk)


POWER_RESPONSES = {202: InstanceDetailOut, **REFUSALS}


def _power_route(operation: PowerOperation) -> None:
    """POST /projects/{slug}/instances/{instance_id}/<path>: claim the operation, answer 202."""

    def view(request: HttpRequest, slug: Slug, instance_id: Id) -> Status:
        instance = object_for(Instance, request, slug, instance_id, Role.OPERATOR)
        power.instance_power(instance=instance, actor=request_user(request), operation=operation)
        return Status(202, _instances().get(pk=instance.pk))

    view.__name__ = f"instance_{operation.name}"
    router.post(
        f"/projects/{{slug}}/instances/{{instance_id}}/{operation.path}",
        response=POWER_RESPONSES,
        description=operation.summary,
    )(view)


for _operation in POWER_OPERATIONS:
    _power_route(_operation)
