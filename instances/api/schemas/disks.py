"""Bodies of disks and their snapshots."""

from datetime import datetime
from typing import Annotated

from ninja import Field, Schema

from instances.api.schemas.base import Id, In, Number, Text
from instances.choices import (
    DiskBus,
    DiskRole,
    SnapshotState,
)
from instances.create_fields import OnForm
from instances.models import Disk


# A disk row of the create form too (forms.DiskRowForm)
class DiskIn(In):
    """A disk created with an instance."""

    size_gb: Annotated[Number, OnForm(label="Size (GB)", min_value=1, initial=1)]
    role: DiskRole = DiskRole.SECONDARY
    image: Id | None = None
    bus: Annotated[DiskBus, OnForm()] = DiskBus.AUTO
    name: Annotated[Text, OnForm(max_length=63, help_text="Optional")] = ""
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
    digest: str = Field(
        description="The image digest a container disk runs (sha256:…), pinned at its first "
        "pull; empty for other disks and before the first start."
    )
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
