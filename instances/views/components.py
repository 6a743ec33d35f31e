"""Actions of the details page's Storage and Networking tabs. Each posts, calls one service,
and sends the user back to the tab with a message saying what happened or what to fix; the
tabs' own forms (a new disk, a new interface) come back with each mistake at its field."""

from collections.abc import Callable

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from instances.access import instance_for_user
from instances.actions import RULES
from instances.choices import Role
from instances.confirm import question_page
from instances.errors import ActionRefused
from instances.forms import DiskAddForm, NicAddForm, apply_errors, images_for
from instances.http import AuthedRequest
from instances.models import Disk, DiskSnapshot, ElasticIP, Instance, NetworkInterface
from instances.selectors import M, chosen
from instances.services import network, snapshots, storage
from instances.templatetags.row_messages import row_tags
from instances.views.instances import back_to_detail, detail_context, detail_url

TAB_FORMS = {"storage": "disk_form", "networking": "nic_form"}  # detail_context's names


def _run(
    request: AuthedRequest,
    instance: Instance,
    tab: str,
    done: str,
    call: Callable[[], object],
    row: Callable[[], str] = str,
) -> HttpResponse:
    """Call the action; back to the tab with what happened. Given how to find the row the
    action was asked from (looked up only on an error), its error is shown there
    (templatetags.row_messages), else at the top of the page."""
    try:
        call()
    except ValidationError as error:
        messages.error(request, " ".join(error.messages), extra_tags=row_tags(row()))
    except ActionRefused as refused:
        messages.error(request, refused.message, extra_tags=row_tags(row()))
    else:
        messages.success(request, done)
    return back_to_detail(request, instance, tab)


def _form_run(
    request: AuthedRequest,
    instance: Instance,
    role: Role,
    tab: str,
    done: str,
    form: forms.Form,
    call: Callable[[dict], object],
) -> HttpResponse:
    """A tab's own form (a new disk, a new interface): done, back to the tab with a message; a
    mistake, the tab again with each message at its field and what was typed kept."""
    if form.is_valid():
        try:
            call(form.cleaned_data)
        except ValidationError as error:
            apply_errors(error, form, {})
        except ActionRefused as refused:
            form.add_error(None, refused.message)
        else:
            messages.success(request, done)
            return back_to_detail(request, instance, tab)
    context = detail_context(instance, role, tab)
    context[TAB_FORMS[tab]] = form
    return render(request, "instances/instance_detail.html", context)


def _asked(
    request: AuthedRequest,
    instance: Instance,
    role: Role | None,
    rule: str,
    tab: str,
    question: str,
    target: Callable[[], object],
    field: str = "confirm",
) -> HttpResponse | None:
    """Without the answer in the form: the page asking the question first, or, when the rule
    refuses the action, its reason (the action is not tried: it reads the instance again, and
    what changed since must not let it run unasked). A target the form does not name is left to
    the action's own message."""
    if request.POST.get(field) == "1":
        return None
    if not (allowed := RULES[rule](instance, role)):
        messages.error(request, allowed.reason)
        return back_to_detail(request, instance, tab)
    try:
        asked = target()
    except ValidationError:
        return None
    return question_page(request, question, asked, back=detail_url(instance, tab), field=field)


def _int(request: AuthedRequest, name: str) -> int:
    try:
        return int(request.POST.get(name, ""))
    except ValueError:
        raise ValidationError(f"Enter a whole number for {name.replace('_', ' ')}.") from None


def _chosen(rows: QuerySet[M], request: AuthedRequest, name: str, what: str) -> M:
    """The row the form's select named, or a message when it named none of rows."""
    try:
        pk = int(request.POST.get(name, ""))
    except ValueError:
        pk = 0
    return chosen(rows, pk, name, f"Choose {what}.")


@require_POST
@login_required
def disk_action(request: AuthedRequest, project_slug: str, pk: int, action: str) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    user = request.user

    def disk() -> Disk:
        """One of this instance's disks: the tab acts on those only."""
        return _chosen(instance.disks.all(), request, "disk", f"a disk of {instance.name}")

    def insert() -> None:
        iso = _chosen(images_for(instance.project, "iso"), request, "image", "an ISO image")
        storage.cdrom_insert(disk=disk(), actor=user, image=iso)

    def attach() -> None:
        free = _chosen(instance.project.disks.all(), request, "disk", "a disk")
        storage.disk_attach(disk=free, instance=instance, actor=user)

    def free_disk() -> Disk:
        return _chosen(instance.project.disks.filter(instance=None), request, "disk", "a free disk")

    def delete_free() -> None:
        storage.disk_delete(disk=free_disk(), actor=user)

    def detach() -> None:
        storage.disk_detach(disk=disk(), actor=user)

    def resize() -> None:
        storage.disk_resize(disk=disk(), actor=user, size_gb=_int(request, "size_gb"))

    def snapshot() -> None:
        name = request.POST.get("name", "").strip()
        snapshots.disk_snapshot(disk=disk(), actor=user, name=name)

    def snapshot_all() -> None:
        name = request.POST.get("name", "").strip()
        snapshots.instance_snapshot(instance=instance, actor=user, name=name)

    def snapshot_chosen() -> DiskSnapshot:
        rows = DiskSnapshot.objects.filter(disk__in=instance.disks.all()).select_related("disk")
        return _chosen(rows, request, "snapshot", "a snapshot")

    def delete_snapshot() -> None:
        snapshots.disk_snapshot_delete(snapshot=snapshot_chosen(), actor=user)

    def revert() -> None:
        snapshots.disk_snapshot_revert(
            snapshot=snapshot_chosen(), actor=user, confirm=request.POST.get("confirm") == "1"
        )

    def eject() -> None:
        storage.cdrom_eject(disk=disk(), actor=user)

    handlers: dict[str, tuple[str, Callable[[], object]]] = {
        "attach": ("Disk attached.", attach),
        "delete-free": ("Disk deleted.", delete_free),
        "detach": ("Disk detached.", detach),
        "resize": ("Disk resized.", resize),
        "snapshot": ("Snapshot requested.", snapshot),
        "snapshot-all": ("Snapshots of every disk requested, taken together.", snapshot_all),
        "delete-snapshot": ("Snapshot deletion requested.", delete_snapshot),
        "revert": ("Revert requested.", revert),
        "insert": ("Media inserted.", insert),
        "eject": ("Media ejected.", eject),
    }
    if action == "create":
        return _form_run(
            request, instance, role, "storage", "Disk created and attached.",
            DiskAddForm(request.POST),
            lambda data: storage.disk_add(instance=instance, actor=user, **data),
        )  # fmt: skip
    if action not in handlers:
        return HttpResponse(status=404)
    asks = {
        "delete-snapshot": ("configure", "delete_snapshot"),
        "revert": ("revert_disk", "revert"),
    }
    if action in asks:
        rule, question = asks[action]
        if page := _asked(request, instance, role, rule, "storage", question, snapshot_chosen):
            return page
    if action == "delete-free" and (
        page := _asked(request, instance, role, "configure", "storage", "delete_disk", free_disk)
    ):
        return page
    done, call = handlers[action]
    return _run(request, instance, "storage", done, call, row=lambda: _row_of(instance, request))


def _nic_row_of(instance: Instance, request: AuthedRequest) -> str:
    """The Networking tab's row an action was asked from: that of its interface (or of the one
    its Elastic IP is on) when it is this instance's; "" otherwise (the top of the page)."""
    nics = instance.nics.all()
    try:
        if "nic" in request.POST:
            nics = nics.filter(pk=int(request.POST["nic"]))
        else:
            nics = nics.filter(elastic_ip__pk=int(request.POST.get("eip", "")))
    except ValueError:
        return ""
    nic_id = nics.values_list("pk", flat=True).first()
    return f"nic-{nic_id}" if nic_id else ""


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


@require_POST
@login_required
def nic_action(request: AuthedRequest, project_slug: str, pk: int, action: str) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    user = request.user

    def nic() -> NetworkInterface:
        return _chosen(instance.nics.all(), request, "nic", "an interface")

    def eip() -> ElasticIP:
        return _chosen(instance.project.elastic_ips.all(), request, "eip", "an Elastic IP")

    def link() -> None:
        network.nic_set_link(
            nic=nic(), actor=user, up=request.POST.get("up") == "1",
            confirm_primary=request.POST.get("confirm_primary") == "1",
        )  # fmt: skip

    def associate() -> None:
        if request.POST.get("eip"):
            network.eip_associate(eip=eip(), nic=nic(), actor=user)
        else:
            network.eip_allocate_and_associate(nic=nic(), actor=user)

    handlers: dict[str, tuple[str, Callable[[], object]]] = {
        "remove": ("Interface removed.", lambda: network.nic_remove(nic=nic(), actor=user)),
        "link": ("Link state changed.", link),
        "associate-eip": ("Elastic IP associated.", associate),
        "release-eip": ("Elastic IP released.", lambda: network.eip_release(eip=eip(), actor=user)),
    }
    if action == "add":
        return _form_run(
            request, instance, role, "networking",
            "Interface added; it appears in the guest at the next start.",
            NicAddForm(request.POST, instance=instance),
            lambda data: network.nic_add(
                instance=instance, actor=user, **{k: v for k, v in data.items() if v}
            ),
        )  # fmt: skip
    if action not in handlers:
        return HttpResponse(status=404)
    if action == "link" and request.POST.get("up") != "1":
        primary = instance.nics.filter(index=0)

        def taken_down() -> NetworkInterface:
            return _chosen(primary, request, "nic", "an interface")

        page = _asked(
            request, instance, role, "configure", "networking", "link_down", taken_down,
            field="confirm_primary",
        )  # fmt: skip
        if page:
            return page
    done, call = handlers[action]
    return _run(
        request, instance, "networking", done, call, row=lambda: _nic_row_of(instance, request)
    )
