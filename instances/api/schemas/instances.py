"""Bodies of instances: the create request, filters, and what an instance looks like."""

from datetime import datetime
from typing import Annotated

from django import forms
from ninja import Field, Schema

from instances.access import project_role
from instances.actions import Allowed, instance_allowed_actions
from instances.api.schemas.base import Id, In, Number, Text
from instances.api.schemas.disks import DiskIn, DiskOut
from instances.api.schemas.network import NicIn, NicOut
from instances.choices import (
    MEMORY_GB_CHOICES,
    VCPU_CHOICES,
    Bootloader,
    DiskBus,
    LastExit,
    PowerState,
    RunStrategy,
    UserDataMode,
)
from instances.create_fields import OnForm, cluster_choices, zone_choices
from instances.models import Disk, GuestReport, Instance, NetworkInterface
from instances.validators import USER_DATA_MAX_BYTES


# An instance's create fields, declared once: the create form takes the ones marked OnForm
# (create_fields.py), the manifests extend the class, and InstanceRequest is checked against it.
class InstanceIn(In):
    """The same fields as the create form (services.instances.InstanceRequest)."""

    name: Annotated[Text, OnForm(max_length=63, help_text="Also the guest's hostname.")]
    zone: Annotated[Text, OnForm(choices=zone_choices)]
    root_image: Id | None = Field(
        None, description="None: a blank root disk, to install from a CD-ROM among the disks."
    )
    root_size_gb: Annotated[Number, OnForm(label="Root disk size (GB)", min_value=1, initial=1)]
    root_bus: Annotated[DiskBus, OnForm(label="Root disk bus")] = DiskBus.AUTO
    run_strategy: Annotated[RunStrategy, OnForm(widget=forms.RadioSelect)] = RunStrategy.MANUAL
    vcpus: Annotated[Number, OnForm(label="vCPU", choices=[(n, n) for n in VCPU_CHOICES])] = 1
    memory_gb: Annotated[
        Number, OnForm(label="RAM (GB)", choices=[(n, n) for n in MEMORY_GB_CHOICES])
    ] = 1
    sockets: Annotated[Number | None, OnForm(min_value=1, max_value=32)] = None
    cores: Annotated[Number | None, OnForm(min_value=1, max_value=32)] = None
    threads: Annotated[Number | None, OnForm(min_value=1, max_value=32)] = None
    bootloader: Annotated[Bootloader, OnForm()] = Bootloader.BIOS
    secure_boot: Annotated[bool, OnForm()] = False
    persistent_efi: Annotated[bool, OnForm(label="Persistent EFI")] = False
    vtpm: Annotated[bool, OnForm(label="vTPM 2.0")] = False
    user_data_mode: Annotated[UserDataMode, OnForm(widget=forms.RadioSelect)] = UserDataMode.DEFAULT
    custom_user_data: Annotated[
        Text,
        OnForm(
            widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
            help_text=f"At most {USER_DATA_MAX_BYTES // 1024} KiB, the most clouds accept.",
        ),
    ] = ""
    ssh_keys: list[Id] = []
    disks: list[DiskIn] = []
    nics: list[NicIn] = Field([], description="eth0 first; at least one.")
    cluster: Annotated[
        Text,
        OnForm(
            label="Runs on",
            choices=cluster_choices,
            help_text="A cluster runs it on KubeVirt, in a zone of its nodes.",
        ),
    ] = Field("", description="A cluster's name (KubeVirt); empty: this console's hosts (QEMU).")


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


class MigrationOut(Schema):
    phase: str = Field(
        description="KubeVirt's: Pending, Scheduling, ... Running, Succeeded, Failed."
    )
    source: str = Field(description="The node it ran on.")
    target: str = Field(description='The node it moves to ("" until KubeVirt picks one).')
    message: str = Field(description="Why it failed.")


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
    migration: MigrationOut | None = Field(
        None, description="The last live migration (KubeVirt), while and after it runs."
    )
    last_exit: LastExit
    auto_restarts: int
    state_changed_at: datetime
    created_at: datetime

    @staticmethod
    def resolve_ssh_keys(instance: Instance) -> list[int]:
        """From selectors.ssh_key_ids() in a list, else from the instance's (prefetched) keys."""
        ids = getattr(instance, "ssh_key_ids", None)
        return ids if ids is not None else [key.pk for key in instance.ssh_keys.all()]

    @staticmethod
    def resolve_migration(instance: Instance) -> dict[str, str] | None:
        return instance.migration or None


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
    os: str = Field("", description="The OS's pretty name as the agent says it; empty if not.")
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
