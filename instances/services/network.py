"""Subnets, network interfaces, link state and Elastic IPs."""

import ipaddress
import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from instances import actions, row_rules
from instances.access import project_role
from instances.backends.base import MAX_PCI_DEVICES
from instances.choices import CarrierState, IpMode, LinkState, NicModel, PowerState
from instances.errors import ActionRefused
from instances.models import ElasticIP, Instance, NetworkInterface, Project, Subnet
from instances.services import ipam
from instances.services.audit import audit_record
from instances.services.queueing import enqueue_host_task
from instances.services.storage import pci_devices, pci_full
from instances.validators import validate_mac


@transaction.atomic
def subnet_create(
    *,
    project: Project,
    actor: AbstractBaseUser,
    name: str,
    zone: str,
    cidr_v4: str = "",
    cidr_v6: str = "",
    gateway: str | None = None,
    dns_resolvers: str = "",
) -> Subnet:
    actions.require(actions.manage(project_role(actor, project)))
    subnet = Subnet(
        project=project,
        name=name,
        zone=zone,
        cidr_v4=cidr_v4.strip(),
        cidr_v6=cidr_v6.strip(),
        gateway=gateway or None,
        dns_resolvers=dns_resolvers,
    )
    subnet.full_clean()
    subnet.save()
    audit_record(actor=actor, action="subnet.create", project=project, target=subnet)
    return subnet


@transaction.atomic
def subnet_delete(*, subnet: Subnet, actor: AbstractBaseUser) -> None:
    actions.require(actions.manage(project_role(actor, subnet.project)))
    if subnet.nics.exists():
        raise ActionRefused(
            f"Subnet {subnet.name} still has interfaces attached; remove them first."
        )
    audit_record(actor=actor, action="subnet.delete", project=subnet.project, target=subnet)
    subnet.delete()


CHOOSE_SUBNET = "Choose a subnet of this project."


def random_mac() -> str:
    """A locally administered unicast address in QEMU's 52:54:00 range, unused so far."""
    while True:
        mac = "52:54:00:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(3))
        if not NetworkInterface.objects.filter(mac=mac).exists():
            return mac


def check_nic(
    *,
    instance: Instance,
    subnet: Subnet,
    ipv4: str = "",
    ipv6: str = "",
    mac: str = "",
    model: str = NicModel.VIRTIO,
    compare_zone: bool = True,
) -> tuple[str, dict[str, str | None]]:
    """What build_nic checks before it saves (subnet, model, MAC, static addresses), every mistake
    at once by field; returns the MAC as stored and the static addresses. compare_zone False: the
    instance's zone is wrong, and reported as such."""
    errors: dict[str, list[str]] = {}
    if subnet.project_id != instance.project_id:
        errors["subnet"] = [CHOOSE_SUBNET]
    elif compare_zone and subnet.zone != instance.zone:
        where = f"Subnet {subnet.name} is in {subnet.zone}; the instance is in {instance.zone}."
        errors["subnet"] = [where]
    if model not in NicModel.values:
        errors["model"] = ["Choose virtio or e1000."]
    mac = mac.strip()
    if mac:
        try:
            validate_mac(mac)
        except ValidationError as error:
            errors["mac"] = error.messages
        else:
            mac = mac.lower()
            if NetworkInterface.objects.filter(mac=mac).exists():
                errors["mac"] = [f"{mac} is already used by another interface."]
    addresses: dict[str, str | None] = {"ipv4": None, "ipv6": None}
    for field, version, value in (("ipv4", 4, ipv4.strip()), ("ipv6", 6, ipv6.strip())):
        if value and subnet.project_id == instance.project_id:
            try:
                addresses[field] = ipam.check_static_address(subnet, value, field, version)
            except ValidationError as error:
                errors |= error.message_dict
    if errors:
        raise ValidationError(errors)
    return mac, addresses


def build_nic(
    *,
    instance: Instance,
    subnet: Subnet,
    index: int,
    ipv4: str = "",
    ipv6: str = "",
    mac: str = "",
    model: str = NicModel.VIRTIO,
) -> NetworkInterface:
    """Validate (check_nic) and save one NIC with its leases: static addresses when given, else
    IPAM. Raises ValidationError keyed by field; the caller's transaction rolls everything back.
    """
    mac, addresses = check_nic(
        instance=instance, subnet=subnet, ipv4=ipv4, ipv6=ipv6, mac=mac, model=model
    )
    static = any(addresses.values())
    if not static:  # automatic: an address from each range the subnet has
        for field, version, net in (("ipv4", 4, subnet.network_v4), ("ipv6", 6, subnet.network_v6)):
            if net is not None:
                addresses[field] = ipam.next_free_address(subnet, version)
    nic = NetworkInterface.objects.create(
        instance=instance,
        subnet=subnet,
        index=index,
        ip_mode=IpMode.STATIC if static else IpMode.AUTO,
        ipv4=addresses["ipv4"],
        ipv6=addresses["ipv6"],
        mac=mac or random_mac(),
        mac_static=bool(mac),
        model=model,
        carrier=CarrierState.STOPPED,
    )
    for field, address in addresses.items():
        if address:
            ipam.lease(nic, address, field)
    return nic


def nic_add(
    *, instance: Instance, actor: AbstractBaseUser, subnet: Subnet, **options: str
) -> NetworkInterface:
    """Attach the instance to another subnet; the interface appears at the next start."""
    actions.require(actions.configure(instance, project_role(actor, instance.project)))
    with transaction.atomic():
        if pci_devices(instance) >= MAX_PCI_DEVICES:
            raise ActionRefused(pci_full(instance, "remove one first"))
        used = set(instance.nics.values_list("index", flat=True))
        index = next(i for i in range(len(used) + 1) if i not in used)
        nic = build_nic(instance=instance, subnet=subnet, index=index, **options)
        audit_record(actor=actor, action="nic.add", project=instance.project, target=nic)
    return nic


def nic_remove(*, nic: NetworkInterface, actor: AbstractBaseUser) -> None:
    instance = nic.instance
    actions.require(row_rules.nic_remove(nic, project_role(actor, instance.project)))
    with transaction.atomic():
        audit_record(actor=actor, action="nic.remove", project=instance.project, target=nic)
        nic.delete()


def nic_set_link(
    *, nic: NetworkInterface, actor: AbstractBaseUser, up: bool, confirm_primary: bool = False
) -> None:
    """Set the desired link state; taking the primary interface down needs a confirmation."""
    instance = nic.instance
    actions.require(actions.configure(instance, project_role(actor, instance.project)))
    if not up and nic.primary and not confirm_primary:
        raise ActionRefused(
            f"{nic.name} is the primary interface: taking its link down can cut the instance off "
            "the network. Confirm to continue."
        )
    with transaction.atomic():
        nic.link_desired = LinkState.UP if up else LinkState.DOWN
        nic.save(update_fields=["link_desired"])
        audit_record(
            actor=actor,
            action="nic.link_up" if up else "nic.link_down",
            project=instance.project,
            target=nic,
        )
        if instance.power_state == PowerState.RUNNING:
            enqueue_host_task(instance, "instances.nic_set_link", nic.pk)


@transaction.atomic
def eip_allocate(*, project: Project, actor: AbstractBaseUser) -> ElasticIP:
    actions.require(actions.manage(project_role(actor, project)))
    pool = ipaddress.IPv4Network(settings.ZOPDAY_EIP_POOL)
    taken = set(ElasticIP.objects.values_list("address", flat=True))
    address = next((str(ip) for ip in pool.hosts() if str(ip) not in taken), None)
    if address is None:
        raise ActionRefused(f"The Elastic IP pool {pool} is exhausted; release an address first.")
    eip = ElasticIP.objects.create(project=project, address=address)
    audit_record(actor=actor, action="eip.allocate", project=project, target=eip)
    return eip


@transaction.atomic
def eip_associate(*, eip: ElasticIP, nic: NetworkInterface, actor: AbstractBaseUser) -> None:
    role = project_role(actor, eip.project)
    actions.require(actions.manage(role))
    if nic.instance.project_id != eip.project_id:
        raise ValidationError({"nic": "Choose an interface of this project."})
    nic = NetworkInterface.objects.select_related("elastic_ip").get(pk=nic.pk)
    if getattr(nic, "elastic_ip", None) != eip:  # associating it again changes nothing
        actions.require(row_rules.eip_associate(nic, role))
    eip.nic = nic
    eip.save(update_fields=["nic"])
    audit_record(
        actor=actor,
        action="eip.associate",
        project=eip.project,
        target=eip,
        detail={"nic": str(nic), "private_ip": nic.ipv4},
    )


@transaction.atomic
def eip_allocate_and_associate(*, nic: NetworkInterface, actor: AbstractBaseUser) -> ElasticIP:
    """A new address from the pool, associated with nic at once: one change, so a refused
    association keeps no address out of the pool."""
    eip = eip_allocate(project=nic.instance.project, actor=actor)
    eip_associate(eip=eip, nic=nic, actor=actor)
    return eip


@transaction.atomic
def eip_release(*, eip: ElasticIP, actor: AbstractBaseUser) -> None:
    """Disassociate the address if it is associated, else give it back to the pool."""
    actions.require(actions.manage(project_role(actor, eip.project)))
    if eip.nic_id:
        eip.nic = None
        eip.save(update_fields=["nic"])
        audit_record(actor=actor, action="eip.disassociate", project=eip.project, target=eip)
        return
    audit_record(actor=actor, action="eip.release", project=eip.project, target=eip)
    eip.delete()
