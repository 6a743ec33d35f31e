"""Subnets and Elastic IPs of a project."""

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import object_for, project_for
from instances.api.schemas import (
    ElasticIPAssociateIn,
    ElasticIPOut,
    ElasticIPReleaseOut,
    Id,
    Slug,
    SubnetIn,
    SubnetOut,
)
from instances.choices import Role
from instances.models import ElasticIP, NetworkInterface, Subnet
from instances.selectors import chosen
from instances.services.network import (
    eip_allocate,
    eip_associate,
    eip_release,
    subnet_create,
    subnet_delete,
)

router = Router(tags=["network"])


@router.get("/projects/{slug}/subnets", response={200: list[SubnetOut], **ERRORS})
def subnet_list(request: HttpRequest, slug: Slug) -> list[Subnet]:
    project, _ = project_for(request, slug)
    return list(project.subnets.all())


@router.post("/projects/{slug}/subnets", response={201: SubnetOut, **ERRORS})
def subnet_add(request: HttpRequest, slug: Slug, payload: SubnetIn) -> Status:
    project, _ = project_for(request, slug, Role.OPERATOR)
    subnet = subnet_create(project=project, actor=request_user(request), **payload.model_dump())
    return Status(201, subnet)


@router.get("/projects/{slug}/subnets/{subnet_id}", response={200: SubnetOut, **ERRORS})
def subnet_get(request: HttpRequest, slug: Slug, subnet_id: Id) -> Subnet:
    return object_for(Subnet, request, slug, subnet_id)


@router.delete("/projects/{slug}/subnets/{subnet_id}", response={204: None, **REFUSALS})
def subnet_remove(request: HttpRequest, slug: Slug, subnet_id: Id) -> Status:
    """Refused (409) while interfaces are still attached to the subnet."""
    subnet = object_for(Subnet, request, slug, subnet_id, Role.OPERATOR)
    subnet_delete(subnet=subnet, actor=request_user(request))
    return Status(204, None)


@router.get("/projects/{slug}/elastic-ips", response={200: list[ElasticIPOut], **ERRORS})
def elastic_ip_list(request: HttpRequest, slug: Slug) -> list[ElasticIP]:
    project, _ = project_for(request, slug)
    return list(project.elastic_ips.all())


@router.get("/projects/{slug}/elastic-ips/{eip_id}", response={200: ElasticIPOut, **ERRORS})
def elastic_ip_get(request: HttpRequest, slug: Slug, eip_id: Id) -> ElasticIP:
    return object_for(ElasticIP, request, slug, eip_id)


@router.post("/projects/{slug}/elastic-ips", response={201: ElasticIPOut, **REFUSALS})
def elastic_ip_allocate(request: HttpRequest, slug: Slug) -> Status:
    """Take the next free public address from the pool (409 when it is exhausted)."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    return Status(201, eip_allocate(project=project, actor=request_user(request)))


@router.post(
    "/projects/{slug}/elastic-ips/{eip_id}/associate", response={200: ElasticIPOut, **ERRORS}
)
def elastic_ip_associate(
    request: HttpRequest, slug: Slug, eip_id: Id, payload: ElasticIPAssociateIn
) -> ElasticIP:
    """Route the address to an interface's private IPv4."""
    eip = object_for(ElasticIP, request, slug, eip_id, Role.OPERATOR)
    interfaces = NetworkInterface.objects.filter(instance__project=eip.project)
    nic = chosen(interfaces, payload.nic, "nic", "Choose an interface of this project.")
    eip_associate(eip=eip, nic=nic, actor=request_user(request))
    return eip


@router.post(
    "/projects/{slug}/elastic-ips/{eip_id}/release",
    response={200: ElasticIPReleaseOut, **ERRORS},
)
def elastic_ip_release(request: HttpRequest, slug: Slug, eip_id: Id) -> dict:
    """An associated address is disassociated (and stays allocated); a free one is released."""
    eip = object_for(ElasticIP, request, slug, eip_id, Role.OPERATOR)
    outcome = "disassociated" if eip.nic_id else "released"
    eip_release(eip=eip, actor=request_user(request))
    return {"address": eip.address, "outcome": outcome}
