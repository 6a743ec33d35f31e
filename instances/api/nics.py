"""An instance's network interfaces."""

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import object_for
from instances.api.schemas import Id, NicIn, NicLinkIn, NicOut, Slug
from instances.choices import Role
from instances.models import Instance, NetworkInterface, Subnet
from instances.selectors import chosen
from instances.services import network
from instances.services.network import CHOOSE_SUBNET

router = Router(tags=["network interfaces"])

NICS = "/projects/{slug}/instances/{instance_id}/nics"


def _nic(
    request: HttpRequest, slug: str, instance_id: int, nic_id: int, required: Role = Role.OPERATOR
) -> NetworkInterface:
    instance = object_for(Instance, request, slug, instance_id, required)
    nic = instance.nics.filter(pk=nic_id).select_related("instance__project").first()
    if nic is None:
        raise Http404("Not found.")
    return nic


@router.get(NICS, response={200: list[NicOut], **ERRORS})
def nic_list(request: HttpRequest, slug: Slug, instance_id: Id) -> list[NetworkInterface]:
    instance = object_for(Instance, request, slug, instance_id)
    return list(instance.nics.all())


@router.post(NICS, response={201: NicOut, **REFUSALS})
def nic_add(request: HttpRequest, slug: Slug, instance_id: Id, payload: NicIn) -> Status:
    """The next free ethN; it appears in the guest at the next start."""
    instance = object_for(Instance, request, slug, instance_id, Role.OPERATOR)
    options = payload.model_dump(exclude={"subnet"})
    try:
        subnet = chosen(instance.project.subnets.all(), payload.subnet, "subnet", CHOOSE_SUBNET)
    except ValidationError as missing:  # reported with the other fields' mistakes
        try:
            network.check_nic(instance=instance, subnet=Subnet(), **options)
        except ValidationError as error:
            raise ValidationError(error.message_dict | missing.message_dict) from None
        raise
    nic = network.nic_add(
        instance=instance, actor=request_user(request), subnet=subnet,
        ipv4=payload.ipv4, ipv6=payload.ipv6, mac=payload.mac, model=payload.model,
    )  # fmt: skip
    return Status(201, nic)


@router.get(NICS + "/{nic_id}", response={200: NicOut, **ERRORS})
def nic_get(request: HttpRequest, slug: Slug, instance_id: Id, nic_id: Id) -> NetworkInterface:
    return _nic(request, slug, instance_id, nic_id, Role.VIEWER)


@router.delete(NICS + "/{nic_id}", response={204: None, **REFUSALS})
def nic_remove(request: HttpRequest, slug: Slug, instance_id: Id, nic_id: Id) -> Status:
    """Only while the instance is stopped (409 otherwise)."""
    nic = _nic(request, slug, instance_id, nic_id)
    network.nic_remove(nic=nic, actor=request_user(request))
    return Status(204, None)


@router.post(NICS + "/{nic_id}/link", response={200: NicOut, **REFUSALS})
def nic_set_link(
    request: HttpRequest, slug: Slug, instance_id: Id, nic_id: Id, payload: NicLinkIn
) -> NetworkInterface:
    """Taking eth0 down is refused (409) unless confirm_primary is true."""
    nic = _nic(request, slug, instance_id, nic_id)
    network.nic_set_link(
        nic=nic, actor=request_user(request), up=payload.up, confirm_primary=payload.confirm_primary
    )
    return nic
