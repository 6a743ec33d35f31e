"""Bodies of network interfaces and Elastic IPs."""

from datetime import datetime
from typing import Annotated, Literal

from ninja import Field, Schema

from instances.api.schemas.base import Id, In, Text
from instances.choices import (
    CarrierState,
    IpMode,
    LinkState,
    NicModel,
)
from instances.create_fields import OnForm
from instances.models import ElasticIP, NetworkInterface
from instances.validators import validate_mac


# An interface row of the create form too (forms.NicRowForm)
class NicIn(In):
    subnet: Id
    ipv4: Annotated[Text, OnForm(label="Static IPv4", help_text="Empty: automatic (IPAM)")] = Field(
        "", description="Static address; empty for the next free one."
    )
    ipv6: Annotated[Text, OnForm(label="Static IPv6")] = ""
    mac: Annotated[
        Text,
        OnForm(label="Static MAC", help_text="e.g. 52:54:00:12:34:56", validators=[validate_mac]),
    ] = Field("", description="Colon notation; empty for a random one.")
    model: Annotated[NicModel, OnForm()] = NicModel.VIRTIO


class NicLinkIn(In):
    up: bool
    confirm_primary: bool = Field(
        False, description="Needed to take the primary interface (eth0) down."
    )


class NicOut(Schema):
    id: int
    name: str
    index: int
    primary: bool
    subnet: int
    ip_mode: IpMode
    ipv4: str | None
    ipv6: str | None
    mac: str
    mac_static: bool
    model: NicModel
    link_desired: LinkState
    carrier: CarrierState
    elastic_ip: str | None

    @staticmethod
    def resolve_subnet(nic: NetworkInterface) -> int:
        return nic.subnet_id

    @staticmethod
    def resolve_elastic_ip(nic: NetworkInterface) -> str | None:
        return ElasticIP.objects.filter(nic=nic).values_list("address", flat=True).first()


class ElasticIPAssociateIn(In):
    nic: Id


class ElasticIPOut(Schema):
    id: int
    address: str
    nic: int | None
    allocated_at: datetime

    @staticmethod
    def resolve_nic(eip: ElasticIP) -> int | None:
        return eip.nic_id


class ElasticIPReleaseOut(Schema):
    address: str
    outcome: Literal["disassociated", "released"] = Field(
        description="disassociated (it was associated: it stays allocated) or released."
    )
