"""Request and response bodies. Inputs mirror the services' arguments and use their field names,
so a service's error key (`root_image`, `nics-0-subnet`) names the field the client sent.

Checks of meaning (zones, sizes, CIDRs, MACs, cloud-config) stay in the services, which answer
with the same messages as the pages; the types here only keep out what no service should see:
NUL characters, lone surrogates, and numbers no database column can hold.
"""

from datetime import datetime
from typing import Annotated, Literal

from ninja import Field, Schema
from pydantic import AfterValidator, ConfigDict
from pydantic_core import PydanticCustomError

from instances.access import project_role
from instances.actions import Allowed, instance_allowed_actions
from instances.choices import (
    Bootloader,
    CarrierState,
    DiskBus,
    DiskRole,
    ImageKind,
    IpMode,
    LastExit,
    LinkState,
    NicModel,
    OsType,
    PowerState,
    Role,
    RunStrategy,
    SnapshotState,
    UserDataMode,
)
from instances.models import Disk, ElasticIP, GuestReport, Image, Instance, NetworkInterface


def _storable(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "Text cannot contain NUL (0x00) characters.")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise PydanticCustomError("text_unicode", "Text must be valid Unicode.") from None
    return value


Text = Annotated[str, AfterValidator(_storable)]
Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
Number = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Slug = Annotated[str, Field(pattern=r"^[-a-zA-Z0-9_]+$", max_length=50)]


# Projects and images


class In(Schema):
    """A request body: a field it does not know is refused, not ignored (a misspelt name would
    otherwise leave its setting at the default)."""

    model_config = ConfigDict(extra="forbid")


class ProjectOut(Schema):
    slug: str
    name: str
    description: str
    role: Role


class ImageOut(Schema):
    id: int
    name: str
    kind: ImageKind
    os_type: OsType
    min_disk_gb: int
    description: str
    shared: bool

    @staticmethod
    def resolve_shared(image: Image) -> bool:
        return image.project_id is None


# Subnets and SSH keys


class SubnetIn(In):
    name: Text
    zone: Text
    cidr_v4: Text = ""
    cidr_v6: Text = ""
    gateway: Text | None = Field(None, description="Defaults to the first address.")
    dns_resolvers: Text = Field("", description="Comma-separated IP addresses.")


class SubnetOut(Schema):
    id: int
    name: str
    zone: str
    cidr_v4: str
    cidr_v6: str
    gateway: str | None
    dns_resolvers: str
    created_at: datetime


class SSHKeyIn(In):
    name: Text
    public_key: Text = Field(description="An OpenSSH public key, e.g. ssh-ed25519 AAAA... me@host")


class SSHKeyOut(Schema):
    id: int
    name: str
    public_key: str
    fingerprint: str
    created_at: datetime


# Disks


class DiskIn(In):
    """A disk created with an instance."""

    size_gb: Number
    role: DiskRole = DiskRole.SECONDARY
    image: Id | None = None
    bus: DiskBus = DiskBus.AUTO
    name: Text = ""
    boot_order: Number | None = None


class DiskCreateIn(In):
    """A free disk of the project, to attach later."""

    name: Text
    zone: Text
    size_gb: Number
    bus: DiskBus = DiskBus.AUTO
    image: Id | None = None
    role: DiskRole = DiskRole.SECONDARY


class DiskAttachIn(In):
    instance: Id


class DiskResizeIn(In):
    size_gb: Number


class SnapshotIn(In):
    name: Text


class DiskOut(Schema):
    id: int
    name: str
    zone: str
    role: DiskRole
    size_gb: int
    bus: DiskBus
    image: int | None
    instance: int | None
    boot_order: int | None
    created_at: datetime

    @staticmethod
    def resolve_image(disk: Disk) -> int | None:
        return disk.image_id

    @staticmethod
    def resolve_instance(disk: Disk) -> int | None:
        return disk.instance_id


class SnapshotRevertIn(In):
    confirm: bool = Field(
        default=False,
        description="Reverting discards what the disk holds since the snapshot: say true.",
    )


class SnapshotOut(Schema):
    id: int
    disk: int
    name: str
    state: SnapshotState = Field(
        description="taking, ready, failed, reverting or deleting; asking again for a failed "
        "one retries it"
    )
    message: str = Field(description="Why it failed.")
    consistent: bool = Field(description="The guest's filesystems were frozen for it.")
    created_at: datetime

    @staticmethod
    def resolve_disk(snapshot: object) -> int:
        return snapshot.disk_id  # type: ignore[attr-defined]


# Network interfaces and Elastic IPs


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


# Instances


class InstanceIn(In):
    """The same fields as the create form (services.instances.InstanceRequest)."""

    name: Text
    zone: Text
    root_image: Id | None = Field(
        None, description="None: a blank root disk, to install from a CD-ROM among the disks."
    )
    root_size_gb: Number
    root_bus: DiskBus = DiskBus.AUTO
    run_strategy: RunStrategy = RunStrategy.MANUAL
    vcpus: Number = 1
    memory_gb: Number = 1
    sockets: Number | None = None
    cores: Number | None = None
    threads: Number | None = None
    bootloader: Bootloader = Bootloader.BIOS
    secure_boot: bool = False
    persistent_efi: bool = False
    vtpm: bool = False
    user_data_mode: UserDataMode = UserDataMode.DEFAULT
    custom_user_data: Text = ""
    ssh_keys: list[Id] = []
    disks: list[DiskIn] = []
    nics: list[NicIn] = Field([], description="eth0 first; at least one.")


class RunStrategyIn(In):
    run_strategy: RunStrategy


class InstanceFilters(Schema):
    state: PowerState | None = None
    zone: Text | None = None
    subnet: Id | None = Field(None, description="Instances with an interface on this subnet.")
    search: Text | None = Field(
        None, description="Part of the name, an IP address (private or Elastic) or a MAC."
    )
    page: int = Field(1, ge=1, le=100_000)
    page_size: int = Field(50, ge=1, le=200)


class InstanceOut(Schema):
    id: int
    name: str
    zone: str
    host: str
    backend: str
    run_strategy: RunStrategy
    vcpus: int
    memory_gb: int
    sockets: int | None
    cores: int | None
    threads: int | None
    bootloader: Bootloader
    secure_boot: bool
    persistent_efi: bool
    vtpm: bool
    user_data_mode: UserDataMode
    ssh_keys: list[int]
    power_state: PowerState
    power_message: str
    last_exit: LastExit
    auto_restarts: int
    state_changed_at: datetime
    created_at: datetime

    @staticmethod
    def resolve_ssh_keys(instance: Instance) -> list[int]:
        return [key.pk for key in instance.ssh_keys.all()]


class GuestInterfaceOut(Schema):
    name: str
    mac: str
    addresses: list[str] = Field(description='As the guest has them, e.g. "10.0.0.5/24".')
    carrier: bool | None = Field(
        None, description="Whether the guest's driver sees a carrier; null when it does not say."
    )


class GuestFilesystemOut(Schema):
    mountpoint: str
    type: str
    device: str
    total_bytes: int | None
    used_bytes: int | None


class GuestOut(Schema):
    hostname: str
    interfaces: list[GuestInterfaceOut]
    memory_total_kb: int
    memory_available_kb: int
    filesystems: list[GuestFilesystemOut]
    reported_at: datetime


class AllowedOut(Schema):
    ok: bool
    reason: str


class InstanceDetailOut(InstanceOut):
    disks: list[DiskOut]
    nics: list[NicOut]
    allowed_actions: dict[str, AllowedOut] = Field(
        description="What the caller may do now, and why not (the same rule as the buttons)."
    )
    guest: GuestOut | None = Field(
        description=(
            "What the guest agent reported since the instance last started (asked every "
            "ZOPDAY_GUEST_REPORT_SECONDS); null while it is not running or before its agent "
            "answers, and for cloud VMs."
        )
    )

    @staticmethod
    def resolve_disks(instance: Instance) -> list[Disk]:
        return list(instance.disks.all())

    @staticmethod
    def resolve_nics(instance: Instance) -> list[NetworkInterface]:
        return list(instance.nics.all())

    @staticmethod
    def resolve_guest(instance: Instance) -> GuestReport | None:
        report = GuestReport.objects.filter(instance=instance).first()
        return report if report and report.current_for(instance) else None

    @staticmethod
    def resolve_allowed_actions(instance: Instance, context: dict) -> dict[str, Allowed]:
        role = project_role(context["request"].user, instance.project)
        return instance_allowed_actions(instance, role)


class InstancePage(Schema):
    count: int
    page: int
    page_size: int
    items: list[InstanceOut]
