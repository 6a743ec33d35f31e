"""Disks of a project: create, attach, detach, resize; snapshots of a disk or of all of an
instance's disks at once: take, list, revert, delete."""

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest
from ninja import Router
from ninja.responses import Status

from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import CHOOSE_IMAGE, images_of, object_for, project_for
from instances.api.schemas import (
    DiskAttachIn,
    DiskCreateIn,
    DiskOut,
    DiskResizeIn,
    Id,
    Slug,
    SnapshotIn,
    SnapshotOut,
    SnapshotRevertIn,
)
from instances.choices import Role
from instances.models import Disk, DiskSnapshot, Instance
from instances.selectors import chosen
from instances.services import snapshots, storage

router = Router(tags=["disks"])


@router.get("/projects/{slug}/disks", response={200: list[DiskOut], **ERRORS})
def disk_list(request: HttpRequest, slug: Slug) -> list[Disk]:
    project, _ = project_for(request, slug)
    return list(project.disks.all())


@router.post("/projects/{slug}/disks", response={201: DiskOut, **ERRORS})
def disk_create(request: HttpRequest, slug: Slug, payload: DiskCreateIn) -> Status:
    """A free disk in a zone, to attach to an instance of that zone."""
    project, _ = project_for(request, slug, Role.OPERATOR)
    image = None
    if payload.image is not None:
        try:
            image = chosen(images_of(project), payload.image, "image", CHOOSE_IMAGE)
        except ValidationError as missing:  # reported with the other fields' mistakes
            fields = payload.model_dump(exclude={"image"})
            try:
                storage.disk_check(project=project, **fields)
            except ValidationError as error:
                raise ValidationError(error.message_dict | missing.message_dict) from None
            raise
    disk = storage.disk_create(
        project=project,
        actor=request_user(request),
        name=payload.name,
        zone=payload.zone,
        size_gb=payload.size_gb,
        bus=payload.bus,
        image=image,
        role=payload.role,
    )
    return Status(201, disk)


@router.get("/projects/{slug}/disks/{disk_id}", response={200: DiskOut, **ERRORS})
def disk_get(request: HttpRequest, slug: Slug, disk_id: Id) -> Disk:
    return object_for(Disk, request, slug, disk_id)


@router.delete("/projects/{slug}/disks/{disk_id}", response={204: None, **REFUSALS})
def disk_delete(request: HttpRequest, slug: Slug, disk_id: Id) -> Status:
    """A free disk only (409 while attached); its file goes from the host that holds it."""
    disk = object_for(Disk, request, slug, disk_id, Role.OPERATOR)
    storage.disk_delete(disk=disk, actor=request_user(request))
    return Status(204, None)


@router.post("/projects/{slug}/disks/{disk_id}/attach", response={200: DiskOut, **REFUSALS})
def disk_attach(request: HttpRequest, slug: Slug, disk_id: Id, payload: DiskAttachIn) -> Disk:
    """A running instance gets the disk hot-plugged at once."""
    disk = object_for(Disk, request, slug, disk_id, Role.OPERATOR)
    instance = chosen(
        disk.project.instances.all(), payload.instance, "instance",
        "Choose an instance of this project.",
    )  # fmt: skip
    storage.disk_attach(disk=disk, instance=instance, actor=request_user(request))
    return disk


@router.post("/projects/{slug}/disks/{disk_id}/detach", response={200: DiskOut, **REFUSALS})
def disk_detach(request: HttpRequest, slug: Slug, disk_id: Id) -> Disk:
    """Only from a stopped instance (409 otherwise)."""
    disk = object_for(Disk, request, slug, disk_id, Role.OPERATOR)
    storage.disk_detach(disk=disk, actor=request_user(request))
    return disk


@router.post("/projects/{slug}/disks/{disk_id}/resize", response={200: DiskOut, **REFUSALS})
def disk_resize(request: HttpRequest, slug: Slug, disk_id: Id, payload: DiskResizeIn) -> Disk:
    """Disks only grow."""
    disk = object_for(Disk, request, slug, disk_id, Role.OPERATOR)
    storage.disk_resize(disk=disk, actor=request_user(request), size_gb=payload.size_gb)
    return disk


@router.get(
    "/projects/{slug}/disks/{disk_id}/snapshots", response={200: list[SnapshotOut], **ERRORS}
)
def disk_snapshot_list(request: HttpRequest, slug: Slug, disk_id: Id) -> list[DiskSnapshot]:
    return list(object_for(Disk, request, slug, disk_id).snapshots.all())


@router.post("/projects/{slug}/disks/{disk_id}/snapshots", response={201: SnapshotOut, **REFUSALS})
def disk_snapshot(request: HttpRequest, slug: Slug, disk_id: Id, payload: SnapshotIn) -> Status:
    """The guest's filesystems are frozen around the snapshot when it runs. It is taken on the
    instance's host: its state goes from taking to ready, or to failed with the reason; the
    name of a failed snapshot, asked for again, retries it."""
    disk = object_for(Disk, request, slug, disk_id, Role.OPERATOR)
    snapshot = snapshots.disk_snapshot(disk=disk, actor=request_user(request), name=payload.name)
    return Status(201, snapshot)


@router.post(
    "/projects/{slug}/instances/{instance_id}/snapshots",
    response={201: list[SnapshotOut], **REFUSALS},
)
def instance_snapshot(
    request: HttpRequest, slug: Slug, instance_id: Id, payload: SnapshotIn
) -> Status:
    """An instance snapshot: a snapshot of that name on every root and secondary disk, taken
    together under one freeze of the guest's filesystems when it runs, so the disks agree. Each
    disk's snapshot is then its own (revert, delete) under /disks/{disk_id}/snapshots."""
    instance = object_for(Instance, request, slug, instance_id, Role.OPERATOR)
    taken = snapshots.instance_snapshot(
        instance=instance, actor=request_user(request), name=payload.name
    )
    return Status(201, taken)


@router.get(
    "/projects/{slug}/disks/{disk_id}/snapshots/{snapshot_id}",
    response={200: SnapshotOut, **ERRORS},
)
def disk_snapshot_get(
    request: HttpRequest, slug: Slug, disk_id: Id, snapshot_id: Id
) -> DiskSnapshot:
    return _snapshot(request, slug, disk_id, snapshot_id, Role.VIEWER)


@router.delete(
    "/projects/{slug}/disks/{disk_id}/snapshots/{snapshot_id}",
    response={202: SnapshotOut, **REFUSALS},
)
def disk_snapshot_delete(request: HttpRequest, slug: Slug, disk_id: Id, snapshot_id: Id) -> Status:
    """A ready or failed snapshot reads deleting until the host removed it from the disk; then
    it is gone (404)."""
    snapshot = _snapshot(request, slug, disk_id, snapshot_id)
    snapshots.disk_snapshot_delete(snapshot=snapshot, actor=request_user(request))
    return Status(202, snapshot)


@router.post(
    "/projects/{slug}/disks/{disk_id}/snapshots/{snapshot_id}/revert",
    response={202: SnapshotOut, **REFUSALS},
)
def disk_snapshot_revert(
    request: HttpRequest, slug: Slug, disk_id: Id, snapshot_id: Id, payload: SnapshotRevertIn
) -> Status:
    """Only a stopped instance's disk, to a ready snapshot, with confirm true (409 otherwise).
    The instance's host reverts it; a start that comes first makes it fail, as its events say."""
    snapshot = _snapshot(request, slug, disk_id, snapshot_id)
    snapshots.disk_snapshot_revert(
        snapshot=snapshot, actor=request_user(request), confirm=payload.confirm
    )
    return Status(202, snapshot)


def _snapshot(
    request: HttpRequest, slug: str, disk_id: int, snapshot_id: int, required: Role = Role.OPERATOR
) -> DiskSnapshot:
    disk = object_for(Disk, request, slug, disk_id, required)
    snapshot = disk.snapshots.filter(pk=snapshot_id).first()
    if snapshot is None:
        raise Http404("Not found.")
    return snapshot
