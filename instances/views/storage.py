"""The Storage tab's actions, one view each, at disks/<action>/ (DISK_VIEWS)."""

from functools import partial

from django.http import HttpResponse

from instances import actions, row_rules
from instances.choices import Role
from instances.forms import DiskAddForm, images_for
from instances.http import AuthedRequest
from instances.models import Disk, DiskSnapshot, Instance
from instances.services import snapshots, storage
from instances.views.tab_actions import (
    TabView,
    asked,
    chosen_in,
    form_run,
    run,
    tab_actions,
    whole_number,
)

TAB = "storage"


def _disk(request: AuthedRequest, instance: Instance) -> Disk:
    """One of this instance's disks: the tab acts on those only."""
    return chosen_in(instance.disks.all(), request, "disk", f"a disk of {instance.name}")


def _free_disk(request: AuthedRequest, instance: Instance) -> Disk:
    return chosen_in(instance.project.disks.filter(instance=None), request, "disk", "a free disk")


def _snapshot(request: AuthedRequest, instance: Instance) -> DiskSnapshot:
    rows = DiskSnapshot.objects.filter(disk__in=instance.disks.all()).select_related("disk")
    return chosen_in(rows, request, "snapshot", "a snapshot")


def disk_create(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return form_run(
        request, instance, role, TAB, "Disk created and attached.", DiskAddForm(request.POST),
        lambda data: storage.disk_add(instance=instance, actor=request.user, **data),
    )  # fmt: skip


def disk_attach(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def attach() -> None:
        free = chosen_in(instance.project.disks.all(), request, "disk", "a disk")
        storage.disk_attach(disk=free, instance=instance, actor=request.user)

    return _run(request, instance, "Disk attached.", attach)


def disk_delete_free(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    free = lambda: _free_disk(request, instance)  # noqa: E731
    if page := asked(request, instance, role, actions.configure, TAB, "delete_disk", free):
        return page
    return _run(
        request, instance, "Disk deleted.",
        lambda: storage.disk_delete(disk=free(), actor=request.user),
    )  # fmt: skip


def disk_detach(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return _run(
        request, instance, "Disk detached.",
        lambda: storage.disk_detach(disk=_disk(request, instance), actor=request.user),
    )  # fmt: skip


def disk_resize(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def resize() -> None:
        size_gb = whole_number(request, "size_gb")
        storage.disk_resize(disk=_disk(request, instance), actor=request.user, size_gb=size_gb)

    return _run(request, instance, "Disk resized.", resize)


def disk_snapshot(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def snapshot() -> None:
        name = request.POST.get("name", "").strip()
        snapshots.disk_snapshot(disk=_disk(request, instance), actor=request.user, name=name)

    return _run(request, instance, "Snapshot requested.", snapshot)


def instance_snapshot(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def snapshot_all() -> None:
        name = request.POST.get("name", "").strip()
        snapshots.instance_snapshot(instance=instance, actor=request.user, name=name)

    done = "Snapshots of every disk requested, taken together."
    return _run(request, instance, done, snapshot_all)


def snapshot_delete(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    target = lambda: _snapshot(request, instance)  # noqa: E731
    if page := asked(
        request, instance, role, actions.configure, TAB, "delete_snapshot", target,
        row_rule=row_rules.snapshot_delete,
    ):  # fmt: skip
        return page
    return _run(
        request, instance, "Snapshot deletion requested.",
        lambda: snapshots.disk_snapshot_delete(snapshot=target(), actor=request.user),
    )  # fmt: skip


def snapshot_revert(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    target = lambda: _snapshot(request, instance)  # noqa: E731
    if page := asked(
        request, instance, role, actions.revert_disk, TAB, "revert", target,
        row_rule=row_rules.snapshot_revert,
    ):  # fmt: skip
        return page

    def revert() -> None:
        confirm = request.POST.get("confirm") == "1"
        snapshots.disk_snapshot_revert(snapshot=target(), actor=request.user, confirm=confirm)

    return _run(request, instance, "Revert requested.", revert)


def cdrom_insert(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def insert() -> None:
        iso = chosen_in(images_for(instance.project, "iso"), request, "image", "an ISO image")
        storage.cdrom_insert(disk=_disk(request, instance), actor=request.user, image=iso)

    return _run(request, instance, "Media inserted.", insert)


def cdrom_eject(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return _run(
        request, instance, "Media ejected.",
        lambda: storage.cdrom_eject(disk=_disk(request, instance), actor=request.user),
    )  # fmt: skip


DISK_VIEWS: dict[str, TabView] = {
    "create": disk_create,
    "attach": disk_attach,
    "delete-free": disk_delete_free,
    "detach": disk_detach,
    "resize": disk_resize,
    "snapshot": disk_snapshot,
    "snapshot-all": instance_snapshot,
    "delete-snapshot": snapshot_delete,
    "revert": snapshot_revert,
    "insert": cdrom_insert,
    "eject": cdrom_eject,
}


def _row_of(instance: Instance, request: AuthedRequest) -> str:
    """The Storage tab's row an action was asked from: the row of its disk (or of its
    snapshot's disk) when that is this instance's, the free disks' card for one that is free;
    "" when the form named neither (its message goes to the top of the page)."""
    rows = Disk.objects.filter(project=instance.project)
    try:
        if "snapshot" in request.POST:
            rows = rows.filter(snapshots__pk=int(request.POST["snapshot"]))
        else:
            rows = rows.filter(pk=int(request.POST.get("disk", "")))
    except ValueError:
        return ""
    holder = rows.values_list("pk", "instance_id").first()
    if holder is None:
        return ""
    disk_id, instance_id = holder
    if instance_id == instance.pk:
        return f"disk-{disk_id}"
    return "free-disks" if instance_id is None else ""


_run = partial(run, tab=TAB, row_of=_row_of)
disk_action = tab_actions(DISK_VIEWS)
