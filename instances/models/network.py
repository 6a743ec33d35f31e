import ipaddress
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from instances.choices import CarrierState, IpMode, LinkState, NicModel
from instances.models.clusters import all_zones, zones_message
from instances.models.naming import NamedInProject
from instances.validators import parse_network, validate_dns_label, validate_mac

if TYPE_CHECKING:
    from instances.models.guest import GuestReport


class Subnet(NamedInProject, models.Model):
    """A project network in one zone: an IPv4 and/or IPv6 range, its gateway and DNS resolvers.

    NICs attached to the same subnet share one L2 segment on the hypervisor.
    """

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="subnets"
    )
    name = models.CharField(max_length=63, validators=[validate_dns_label])
    zone = models.CharField(max_length=32)
    cidr_v4 = models.CharField("IPv4 CIDR", max_length=18, blank=True)
    cidr_v6 = models.CharField("IPv6 CIDR", max_length=43, blank=True)
    gateway = models.GenericIPAddressField(
        null=True, blank=True, protocol="IPv4", help_text="Defaults to the first address."
    )
    dns_resolvers = models.CharField(
        max_length=200, blank=True, help_text="Comma-separated IP addresses, e.g. 1.1.1.1, 9.9.9.9"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    name_taken = "A subnet named {name} already exists in this project: choose another name."

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"], name="subnet_name_unique_in_project"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cidr_v4 or self.cidr_v6})"

    @property
    def network_v4(self) -> ipaddress.IPv4Network | None:
        return ipaddress.IPv4Network(self.cidr_v4) if self.cidr_v4 else None

    @property
    def network_v6(self) -> ipaddress.IPv6Network | None:
        return ipaddress.IPv6Network(self.cidr_v6) if self.cidr_v6 else None

    @property
    def resolvers(self) -> list[str]:
        return [r.strip() for r in self.dns_resolvers.split(",") if r.strip()]

    @property
    def guest_resolvers(self) -> list[str]:
        """The resolvers its guests are given: its own, or else the console's default ones."""
        return self.resolvers or list(settings.ZOPDAY_DNS_RESOLVERS)

    @property
    def segment(self) -> str:
        """The hypervisor's name for this subnet's L2 segment."""
        return f"sn{self.pk}"

    def clean(self) -> None:
        errors: dict[str, list[ValidationError]] = {}
        if self.zone and self.zone not in (zones := all_zones()):
            errors.setdefault("zone", []).append(ValidationError(zones_message(zones)))
        if not self.cidr_v4 and not self.cidr_v6:
            errors.setdefault("cidr_v4", []).append(
                ValidationError("Give an IPv4 CIDR, an IPv6 CIDR, or both.")
            )
        nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for field, version in (("cidr_v4", 4), ("cidr_v6", 6)):
            value = getattr(self, field)
            if value:
                try:
                    net = parse_network(value, version)
                except ValidationError as error:
                    errors.setdefault(field, []).append(error)
                    continue
                if net.num_addresses < 4:
                    smallest = "/30" if version == 4 else "/126"
                    errors.setdefault(field, []).append(
                        ValidationError(f"{net} is too small: use at least a {smallest}.")
                    )
                    continue
                nets.append(net)
                self._check_overlap(field, net, errors)
        v4 = next((n for n in nets if n.version == 4), None)
        try:
            gateway = ipaddress.ip_address(self.gateway) if self.gateway else None
        except ValueError:
            gateway = None  # not an address: clean_fields() says so
        if gateway and v4 and gateway not in v4:
            errors.setdefault("gateway", []).append(
                ValidationError(f"The gateway must be inside {v4}.")
            )
        elif gateway and v4 and gateway in (v4.network_address, v4.broadcast_address):
            which = "network" if gateway == v4.network_address else "broadcast"
            errors.setdefault("gateway", []).append(
                ValidationError(
                    f"{gateway} is {v4}'s {which} address: choose a host address, such as "
                    f"{v4.network_address + 1}."
                )
            )
        if self.gateway and not self.cidr_v4:
            errors.setdefault("gateway", []).append(
                ValidationError("A gateway needs an IPv4 CIDR.")
            )
        for resolver in self.resolvers:
            try:
                ipaddress.ip_address(resolver)
            except ValueError:
                errors.setdefault("dns_resolvers", []).append(
                    ValidationError(f"{resolver} is not an IP address.")
                )
        if errors:
            raise ValidationError(errors)
        if v4 and not self.gateway:
            self.gateway = str(v4.network_address + 1)

    def _check_overlap(
        self,
        field: str,
        net: ipaddress.IPv4Network | ipaddress.IPv6Network,
        errors: dict[str, list[ValidationError]],
    ) -> None:
        others = Subnet.objects.filter(project_id=self.project_id).exclude(pk=self.pk)
        for other in others.exclude(**{field: ""}):
            if net.overlaps(ipaddress.ip_network(getattr(other, field))):
                errors.setdefault(field, []).append(
                    ValidationError(
                        f"{net} overlaps subnet {other.name} ({getattr(other, field)})."
                    )
                )


def nic_name(index: int) -> str:
    """The guest's name of the NIC at `index`: eth0 is the primary."""
    return f"eth{index}"


class NetworkInterface(models.Model):
    """An instance's attachment to a subnet: eth0, eth1, ... in index order; eth0 is primary."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="nics"
    )
    subnet = models.ForeignKey(Subnet, on_delete=models.PROTECT, related_name="nics")
    index = models.PositiveSmallIntegerField()
    ip_mode = models.CharField(max_length=8, choices=IpMode.choices, default=IpMode.AUTO)
    ipv4 = models.GenericIPAddressField("IPv4 address", protocol="IPv4", null=True, blank=True)
    ipv6 = models.GenericIPAddressField("IPv6 address", protocol="IPv6", null=True, blank=True)
    mac = models.CharField("MAC address", max_length=17, unique=True, validators=[validate_mac])
    mac_static = models.BooleanField(default=False)
    model = models.CharField(max_length=8, choices=NicModel.choices, default=NicModel.VIRTIO)
    link_desired = models.CharField(max_length=8, choices=LinkState.choices, default=LinkState.UP)
    carrier = models.CharField(
        max_length=8, choices=CarrierState.choices, default=CarrierState.STOPPED
    )
    # when the hypervisor last set the link: a guest's report from before it no longer counts
    link_changed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["instance", "index"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "index"], name="nic_index_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} of {self.instance.name}"

    @property
    def name(self) -> str:
        return nic_name(self.index)

    @property
    def primary(self) -> bool:
        return self.index == 0

    def carrier_seen(self, host_up: bool, report: "GuestReport | None") -> CarrierState:
        """The carrier of the running instance's NIC as the hypervisor and the guest report it:
        down when either side says so. The guest's word counts from a report of its current
        run made after the link was last set; a guest that does not say leaves the host's."""
        if report is None or not report.current_for(self.instance):
            return carrier_from(host_up, self.mac, self.link_changed_at, None, [])
        reported_at, interfaces = report.reported_at, report.interfaces
        return carrier_from(host_up, self.mac, self.link_changed_at, reported_at, interfaces)


def carrier_from(
    host_up: bool,
    mac: str,
    link_changed_at: datetime | None,
    reported_at: datetime | None,
    interfaces: list[dict],
) -> CarrierState:
    """NetworkInterface.carrier_seen on plain values, for a pass over many NICs; `reported_at`
    is None without a guest report of the current run."""
    if not host_up:
        return CarrierState.DOWN
    if reported_at is None:
        return CarrierState.UP
    if link_changed_at is not None and reported_at < link_changed_at:
        return CarrierState.UP
    for interface in interfaces:
        if str(interface.get("mac", "")).lower() == mac.lower():
            return CarrierState.DOWN if interface.get("carrier") is False else CarrierState.UP
    return CarrierState.UP


class IPLease(models.Model):
    """An address of a subnet in use by a NIC: the unique constraint is what IPAM relies on."""

    subnet = models.ForeignKey(Subnet, on_delete=models.CASCADE, related_name="leases")
    address = models.GenericIPAddressField()
    nic = models.ForeignKey(NetworkInterface, on_delete=models.CASCADE, related_name="leases")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["subnet", "address"]
        verbose_name = "IP lease"
        constraints = [
            models.UniqueConstraint(fields=["subnet", "address"], name="one_lease_per_address")
        ]

    def __str__(self) -> str:
        return f"{self.address} → {self.nic}"


class ElasticIP(models.Model):
    """A public address of the project, optionally associated with a NIC's private IPv4."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="elastic_ips"
    )
    address = models.GenericIPAddressField(protocol="IPv4", unique=True)
    nic = models.OneToOneField(
        NetworkInterface,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="elastic_ip",
    )
    allocated_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["address"]
        verbose_name = "Elastic IP"

    def __str__(self) -> str:
        return self.address
