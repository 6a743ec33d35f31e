"""IP address management: leases of subnet addresses for NICs."""

import ipaddress

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from instances.models import IPLease, NetworkInterface, Subnet


def _reserved(subnet: Subnet) -> set[str]:
    """Addresses a NIC can never have: the network, broadcast and gateway addresses."""
    reserved = {subnet.gateway} if subnet.gateway else set()
    for net in (subnet.network_v4, subnet.network_v6):
        if net is not None:
            reserved.add(str(net.network_address))
            if net.version == 4:
                reserved.add(str(net.broadcast_address))
    return reserved


def check_static_address(subnet: Subnet, address: str, field: str, version: int) -> str:
    """A static address must be of the field's IP version, inside the subnet and free."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ValidationError({field: f"{address} is not an IPv{version} address."}) from None
    if ip.version != version:
        raise ValidationError({field: f"{address} is not an IPv{version} address."})
    if getattr(ip, "scope_id", None):
        raise ValidationError(
            {field: f"Give {address} without a %scope: it is the guest's address."}
        )
    net = subnet.network_v4 if ip.version == 4 else subnet.network_v6
    if net is None:
        raise ValidationError({field: f"Subnet {subnet.name} has no IPv{ip.version} range."})
    if ip not in net:
        raise ValidationError({field: f"{ip} is outside subnet {subnet.name} ({net})."})
    if str(ip) in _reserved(subnet):
        raise ValidationError(
            {field: f"{ip} is the network, broadcast or gateway address of {subnet.name}."}
        )
    if IPLease.objects.filter(subnet=subnet, address=str(ip)).exists():
        raise ValidationError({field: f"{ip} is already leased in {subnet.name}."})
    return str(ip)


def next_free_address(subnet: Subnet, version: int) -> str:
    net = subnet.network_v4 if version == 4 else subnet.network_v6
    if net is None:
        raise ValidationError({"subnet": f"Subnet {subnet.name} has no IPv{version} range."})
    taken = set(IPLease.objects.filter(subnet=subnet).values_list("address", flat=True))
    taken |= _reserved(subnet)
    for count, host in enumerate(net.hosts()):
        if str(host) not in taken:
            return str(host)
        if count > 1_000_000:
            break
    raise ValidationError({"subnet": f"Subnet {subnet.name} has no free IPv{version} address."})


def lease(nic: NetworkInterface, address: str, field: str) -> None:
    """Record the lease; the unique constraint settles a race between two requests."""
    try:
        with transaction.atomic():
            IPLease.objects.create(subnet=nic.subnet, address=address, nic=nic)
    except IntegrityError:
        raise ValidationError({field: f"{address} was just leased by another NIC."}) from None
