"""Choice sets of the instances app."""

from typing import Literal

from django.db import models

# A status badge's colour: a CSS class of static/css/zopday.css.
Colour = Literal["grey", "green", "orange", "red"]
# Each status choice set's colours, one per member (tests check that none is missing).
COLOURS: dict[type[models.TextChoices], dict[str, Colour]] = {}


def colour_of(choices: type[models.TextChoices], value: str) -> Colour:
    """The badge colour of a status value, as templates show it; grey for a value unknown."""
    return COLOURS[choices].get(value, "grey")


class Role(models.TextChoices):
    """A member's role in a project. Each role can do everything the roles before it can."""

    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def allows(self, required: "Role") -> bool:
        return self.rank >= required.rank


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    DENIED = "denied", "Denied"


COLOURS[Outcome] = {Outcome.SUCCESS: "green", Outcome.FAILURE: "red", Outcome.DENIED: "red"}


class RunStrategy(models.TextChoices):
    """The seed's run strategies: what the reconciler does when a guest stops by itself."""

    ALWAYS = "Always", "Always"
    MANUAL = "Manual", "Manual"
    RERUN_ON_FAILURE = "RerunOnFailure", "RerunOnFailure"
    ONCE = "Once", "Once"
    HALTED = "Halted", "Halted"


# the strategies under which the reconciler restarts a guest that stopped by itself
AUTO_RESTART_STRATEGIES = (RunStrategy.ALWAYS, RunStrategy.RERUN_ON_FAILURE)

RUN_STRATEGY_HELP = {
    RunStrategy.ALWAYS: "Keeps the instance running; restarts it if the guest stops or crashes.",
    RunStrategy.MANUAL: "Starts only when you start it and stays off when shut down.",
    RunStrategy.RERUN_ON_FAILURE: "Restarts the instance if it crashes or exits with an error.",
    RunStrategy.ONCE: "Starts once and is never restarted, even after a failure.",
    RunStrategy.HALTED: "Kept powered off until the strategy is changed.",
}


class PowerState(models.TextChoices):
    STOPPED = "stopped", "Stopped"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    RESTARTING = "restarting", "Restarting"
    FAILED = "failed", "Failed"
    MIGRATING = "migrating", "Migrating"  # running, while it moves to another node
    PAUSED = "paused", "Paused (disk full)"  # QEMU stopped the guest at a write on a full disk


POWER_TRANSITIONAL = frozenset(
    {PowerState.STARTING, PowerState.STOPPING, PowerState.RESTARTING, PowerState.MIGRATING}
)
POWER_TERMINAL = frozenset(
    {PowerState.STOPPED, PowerState.RUNNING, PowerState.FAILED, PowerState.PAUSED}
)
COLOURS[PowerState] = {
    PowerState.STOPPED: "grey",
    PowerState.STARTING: "orange",
    PowerState.RUNNING: "green",
    PowerState.STOPPING: "orange",
    PowerState.RESTARTING: "orange",
    PowerState.FAILED: "red",
    PowerState.MIGRATING: "orange",
    PowerState.PAUSED: "red",
}


class LastExit(models.TextChoices):
    """How the instance last stopped (mirrors the backend's ExitKind)."""

    NONE = "none", "-"
    REQUESTED = "requested", "Stopped on request"
    GUEST_POWEROFF = "guest-poweroff", "Guest powered off"
    CRASHED = "crashed", "Crashed"


class Bootloader(models.TextChoices):
    BIOS = "bios", "Legacy BIOS"
    UEFI = "uefi", "UEFI"


class UserDataMode(models.TextChoices):
    DEFAULT = "default", "Default configuration"
    CUSTOM = "custom", "Custom #cloud-config"


class DiskBus(models.TextChoices):
    VIRTIO = "virtio", "virtio"
    SATA = "sata", "sata"
    AUTO = "auto", "auto"


class DiskRole(models.TextChoices):
    ROOT = "root", "Root disk"
    SECONDARY = "secondary", "Secondary disk"
    CDROM = "cdrom", "CD-ROM"
    CONTAINER = "container", "Container disk"


class SnapshotState(models.TextChoices):
    """A disk snapshot: asked for, then taken on the instance's host, or failed (the name stays
    reserved: QEMU may still finish writing it, and asking again with it retries); reverting
    while the host brings its disk back to it (the instance does not start meanwhile); deleting
    until the host removed it from the disk, when its record goes."""

    TAKING = "taking", "Taking"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    REVERTING = "reverting", "Reverting"
    DELETING = "deleting", "Deleting"


# the states a host's task moves a snapshot out of
SNAPSHOT_TRANSITIONAL = (SnapshotState.TAKING, SnapshotState.REVERTING, SnapshotState.DELETING)


class ImageKind(models.TextChoices):
    KERNEL = "kernel", "Kernel + initrd"
    QCOW2 = "qcow2", "qcow2 cloud image"
    ISO = "iso", "ISO image"
    CONTAINER = "container", "Container disk (OCI)"
    PVC = "pvc", "Cluster volume (PVC)"


class OsType(models.TextChoices):
    LINUX = "linux", "Linux"
    WINDOWS = "windows", "Windows"
    OTHER = "other", "Other / legacy"


class NicModel(models.TextChoices):
    VIRTIO = "virtio", "virtio"
    E1000 = "e1000", "e1000"


class LinkState(models.TextChoices):
    UP = "up", "Up"
    DOWN = "down", "Down"


class CarrierState(models.TextChoices):
    UP = "up", "Link Up"
    DOWN = "down", "Link Down"
    STOPPED = "stopped", "Instance stopped"


COLOURS[CarrierState] = {
    CarrierState.UP: "green",
    CarrierState.DOWN: "red",
    CarrierState.STOPPED: "grey",
}


class IpMode(models.TextChoices):
    AUTO = "auto", "Automatic (IPAM)"
    STATIC = "static", "Static"


VCPU_CHOICES = (1, 2, 4, 8, 16, 32)
MEMORY_GB_CHOICES = (1, 2, 4, 8, 16, 32, 64)


class ImportFormat(models.TextChoices):
    """What a URL import downloads; a raw disk is converted to qcow2 once it has arrived."""

    QCOW2 = "qcow2", "qcow2 cloud image"
    RAW = "raw", "Raw disk image"
    ISO = "iso", "ISO image"


class ImportStatus(models.TextChoices):
    """An image import from a URL: queued, downloading in a worker, then done, failed (which
    covers a worker that stopped during it) or cancelled; a failed one can be retried."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Downloading"
    CANCELLING = "cancelling", "Cancelling"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


IMPORT_TRANSITIONAL = frozenset(
    {ImportStatus.QUEUED, ImportStatus.RUNNING, ImportStatus.CANCELLING}
)
IMPORT_TERMINAL = frozenset({ImportStatus.DONE, ImportStatus.FAILED, ImportStatus.CANCELLED})
COLOURS[ImportStatus] = {
    ImportStatus.QUEUED: "grey",
    ImportStatus.RUNNING: "orange",
    ImportStatus.CANCELLING: "orange",
    ImportStatus.DONE: "green",
    ImportStatus.FAILED: "red",
    ImportStatus.CANCELLED: "grey",
}


class GitAuth(models.TextChoices):
    """How a git source logs in to its repository."""

    NONE = "none", "None (a public repository)"
    SSH_KEY = "ssh_key", "Deploy key (SSH)"
    TOKEN = "token", "Access token (HTTPS)"


class SyncTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    WEBHOOK = "webhook", "Webhook"
    MANUAL = "manual", "Sync now"


class SyncStatus(models.TextChoices):
    """One sync of a git source: running, then applied (something changed), unchanged, or
    failed (nothing applied: the fetch or the manifests failed)."""

    RUNNING = "running", "Running"
    APPLIED = "applied", "Applied"
    UNCHANGED = "unchanged", "Unchanged"
    FAILED = "failed", "Failed"


SYNC_TRANSITIONAL = frozenset({SyncStatus.RUNNING})
SYNC_TERMINAL = frozenset({SyncStatus.APPLIED, SyncStatus.UNCHANGED, SyncStatus.FAILED})
COLOURS[SyncStatus] = {
    SyncStatus.RUNNING: "orange",
    SyncStatus.APPLIED: "green",
    SyncStatus.UNCHANGED: "grey",
    SyncStatus.FAILED: "red",
}
