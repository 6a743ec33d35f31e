"""Bodies of network interfaces and Elastic IPs."""

from datetime import datetime
from typing import Literal

from ninja import Field, Schema

from instances.api.schemas.base import Id, In, Text
from instances.choices import (
    CarrierState,
    IpMode,
    LinkState,
    NicModel,
)
from instances.models import ElasticIP, NetworkInterface


class NicIn(In):
    subnet: Id
    ipv4: Text = Field("", description="Static address; empty for the next free one.")
    ipv6: Text = ""
    mac: Text = Field("", description="Colon notation; empty for a random one.")
    model: NicModel = NicModel.VIRTIO


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
