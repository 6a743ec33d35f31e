from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from instances.choices import (
    MEMORY_GB_CHOICES,
    POWER_TRANSITIONAL,
    VCPU_CHOICES,
    Bootloader,
    LastExit,
    PowerState,
    RunStrategy,
    UserDataMode,
)
from instances.models.naming import NamedInProject
from instances.validators import parse_cloud_config, validate_dns_label, validate_user_data_size


def _one_of(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values[:-1])) + f" or {values[-1]}"


def _default_host() -> str:
    return settings.ZOPDAY_HOST


class Instance(NamedInProject, models.Model):
    """A virtual machine in one zone: sizing, topology, firmware, cloud-init and power state.

    Services set transitional power states before queueing work; tasks and the reconciler the rest.
    """

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="instances"
    )
    name = models.CharField(max_length=63, validators=[validate_dns_label])
    zone = models.CharField(max_length=32)
    backend = models.CharField(max_length=16, default="qemu")
    host = models.CharField(
        max_length=100, default=_default_host, blank=True,
        help_text="Hypervisor host; blank on a cluster.",
    )  # fmt: skip
    cluster = models.ForeignKey(
        "instances.Cluster", on_delete=models.PROTECT, null=True, blank=True,
        related_name="instances", help_text="The KubeVirt cluster it runs on; none: this "
        "console's own hosts.",
    )  # fmt: skip
    node = models.CharField(
        max_length=253, blank=True, editable=False,
        help_text="The cluster node its VMI runs on, as the cluster's watch last saw it.",
    )  # fmt: skip
    run_strategy = models.CharField(
        max_length=16, choices=RunStrategy.choices, default=RunStrategy.MANUAL
    )
    vcpus = models.PositiveSmallIntegerField(
        "vCPU",
        choices=[(n, n) for n in VCPU_CHOICES],
        default=1,
        error_messages={"invalid_choice": f"Choose a vCPU count of {_one_of(VCPU_CHOICES)}."},
    )
    memory_gb = models.PositiveSmallIntegerField(
        "RAM (GB)",
        choices=[(n, n) for n in MEMORY_GB_CHOICES],
        default=1,
        error_messages={"invalid_choice": f"Choose a RAM size of {_one_of(MEMORY_GB_CHOICES)} GB."},
    )
    sockets = models.PositiveSmallIntegerField(null=True, blank=True)
    cores = models.PositiveSmallIntegerField(null=True, blank=True)
    threads = models.PositiveSmallIntegerField(null=True, blank=True)
    bootloader = models.CharField(max_length=8, choices=Bootloader.choices, default=Bootloader.BIOS)
    secure_boot = models.BooleanField(default=False)
    persistent_efi = models.BooleanField("Persistent EFI", default=False)
    vtpm = models.BooleanField("vTPM 2.0", default=False)
    user_data_mode = models.CharField(
        max_length=8, choices=UserDataMode.choices, default=UserDataMode.DEFAULT
    )
    custom_user_data = models.TextField(blank=True)
    ssh_keys = models.ManyToManyField("instances.SSHKey", blank=True, related_name="instances")
    initial_password = models.CharField(max_length=64, editable=False)
    power_state = models.CharField(
        max_length=16, choices=PowerState.choices, default=PowerState.STOPPED
    )
    power_message = models.CharField(max_length=300, blank=True)
    stop_refusal = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="Why the console must not stop this instance (e.g. an auto scaling group would "
        "replace it), set by what made it; blank when it may.",
    )
    start_refusal = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="Why this instance can never start again (e.g. its cloud VM was terminated "
        "outside the console); blank when it may.",
    )
    last_exit = models.CharField(max_length=16, choices=LastExit.choices, default=LastExit.NONE)
    auto_restarts = models.PositiveIntegerField(default=0)
    restarts_in_a_row = models.PositiveSmallIntegerField(
        default=0, editable=False, help_text="Automatic restarts, each after a short run."
    )
    hotplugged_disks = models.PositiveSmallIntegerField(
        default=0, editable=False, help_text="Disks plugged in since the last start."
    )
    migration = models.JSONField(
        default=dict, blank=True, editable=False,
        help_text="The last live migration: phase, source and target node, message.",
    )  # fmt: skip
    state_changed_at = models.DateTimeField(auto_now_add=True)
    created_at = models.DateTimeField(auto_now_add=True)

    name_taken = "An instance named {name} already exists in this project: choose another name."

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="instance_name_unique")
        ]
        indexes = [models.Index(fields=["host", "power_state"])]

    def __str__(self) -> str:
        return self.name

    @property
    def machine_id(self) -> str:
        """The backend's name for this instance (filesystem- and queue-safe)."""
        return self.machine_id_of(self.pk)

    @staticmethod
    def machine_id_of(pk: int) -> str:
        """The machine id of the instance `pk`, for a pass that reads rows without models."""
        return f"i-{pk}"

    @property
    def is_transitional(self) -> bool:
        return self.power_state in POWER_TRANSITIONAL

    @property
    def topology(self) -> tuple[int, int, int]:
        """sockets × cores × threads; single-threaded sockets unless set explicitly."""
        if self.sockets and self.cores and self.threads:
            return self.sockets, self.cores, self.threads
        return self.vcpus, 1, 1

    def _placement_errors(self) -> dict[str, str]:
        """A zone of where it runs (this console's hosts, or its cluster's nodes) and, on a
        cluster, a size one node of that zone can give."""
        cluster = self.cluster if self.cluster_id else None
        zones = list(cluster.zones) if cluster else list(settings.ZOPDAY_ZONES)
        if not self.zone:
            return {}
        if self.zone not in zones:
            if cluster and not zones:
                return {"cluster": f"{cluster} has no zones yet: check it in the admin."}
            where = f"{cluster}'s zones" if cluster else "the zones"
            return {"zone": f"Choose one of {where}: {', '.join(zones)}."}
        most = (cluster.capacity.get(self.zone) or {}) if cluster else {}
        errors = {}
        if most and self.memory_gb * 1024 > most.get("memory_mb", 0):
            errors["memory_gb"] = (
                f"No node of {cluster} in {self.zone} has {self.memory_gb} GB for a machine: "
                f"the most one gives is {most.get('memory_mb', 0) // 1024} GB."
            )
        if most and self.vcpus > most.get("cpus", 0):
            errors["vcpus"] = (
                f"No node of {cluster} in {self.zone} has {self.vcpus} CPUs for a machine: the "
                f"most one gives is {most.get('cpus', 0)}."
            )
        return errors

    def clean(self) -> None:
        errors: dict[str, str] = {}
        errors.update(self._placement_errors())
        explicit = [self.sockets, self.cores, self.threads]
        if any(explicit) and not all(explicit):
            errors["sockets"] = "Give sockets, cores and threads together, or none of them."
        elif all(explicit):
            product = self.sockets * self.cores * self.threads  # type: ignore[operator]
            if product != self.vcpus:
                errors["sockets"] = (
                    f"sockets × cores × threads is {self.sockets} × {self.cores} × "
                    f"{self.threads} = {product}, but the instance has {self.vcpus} vCPU."
                )
        if self.secure_boot and self.bootloader != Bootloader.UEFI:
            errors["secure_boot"] = "Secure Boot requires the UEFI bootloader."
        if self.persistent_efi and self.bootloader != Bootloader.UEFI:
            errors["persistent_efi"] = "Persistent EFI requires the UEFI bootloader."
        if self.custom_user_data or self.user_data_mode == UserDataMode.CUSTOM:
            try:
                validate_user_data_size(self.custom_user_data)  # kept even when not used
                if self.user_data_mode == UserDataMode.CUSTOM:
                    parse_cloud_config(self.custom_user_data)
            except ValidationError as error:
                errors["custom_user_data"] = error.messages[0]
        if errors:
            raise ValidationError(errors)
