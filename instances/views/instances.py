"""The instance list, the create form and the details page with its power buttons."""

from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling

from instances import selectors
from instances.access import instance_for_user, project_for_user
from instances.actions import RULES, instance_allowed_actions, instance_console_actions
from instances.backends import backend_named, is_local_backend, machine_facts
from instances.choices import (
    POWER_TRANSITIONAL,
    DiskRole,
    ImageKind,
    PowerState,
    Role,
    RunStrategy,
    UserDataMode,
)
from instances.cloudinit import DEFAULT_USER, user_data
from instances.confirm import asked_first, question
from instances.errors import ActionRefused
from instances.filters import InstanceFilterSet
from instances.forms import (
    DiskAddForm,
    DiskFormSet,
    DiskRowForm,
    InstanceForm,
    NicAddForm,
    NicFormSet,
    NicRowForm,
    apply_errors,
    images_for,
)
from instances.http import AuthedRequest
from instances.models import GuestReport, Instance, NetworkInterface
from instances.redaction import user_data_redacted
from instances.services import power
from instances.services.instances import (
    DiskRequest,
    InstanceRequest,
    NicRequest,
    instance_check,
    instance_create,
    instance_delete,
    instance_set_run_strategy,
)
from instances.views.consoles import console_links
from instances.views.polling import digest, poll_url, still_shown

PAGE_SIZE = 50
TABS = ("overview", "storage", "networking", "events")
# Views inside a tab, each at its own ?tab= value: the seed's Storage > UserData.
SUB_VIEWS = {"storage": (("storage", "Disks"), ("user-data", "UserData"))}
TAB_OF = {view: tab for tab, views in SUB_VIEWS.items() for view, _ in views}


@dataclass(frozen=True)
class InstanceRow:
    """What one list row shows, computed once in Python: the template only prints it."""

    pk: int
    name: str
    url: str
    state: str
    state_label: str
    transitional: bool
    zone: str
    size: str
    addresses: list[tuple[str, str]]
    run_strategy: str

    @property
    def row_url(self) -> str:
        return self.url + "row/"


def instance_rows(values: list[dict], project_slug: str) -> list[InstanceRow]:
    """Rows from selectors.instance_table values, with one URL reversal for the whole page."""
    pattern = reverse("instance-detail", args=[project_slug, 0]).replace("/0/", "/{}/")
    addresses = selectors.instance_addresses([row["pk"] for row in values])
    return [
        InstanceRow(
            pk=row["pk"],
            name=row["name"],
            url=pattern.format(row["pk"]),
            state=row["power_state"],
            state_label=PowerState(row["power_state"]).label,
            transitional=row["power_state"] in POWER_TRANSITIONAL,
            zone=row["zone"],
            size=f"{row['vcpus']} vCPU · {row['memory_gb']} GB",
            addresses=addresses[row["pk"]],
            run_strategy=row["run_strategy"],
        )
        for row in values
    ]


@login_required
def instance_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    filters = {key: request.GET.get(key, "").strip() for key in ("state", "zone", "subnet", "q")}
    instances = InstanceFilterSet(filters, queryset=selectors.instance_table(project)).qs
    page = Paginator(instances, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "project": project,
        "role": role,
        "page": page,
        "rows": instance_rows(list(page.object_list), project.slug),
        "filters": filters,
        "states": PowerState.choices,
        "subnets": project.subnets.all(),
        "can_create": role.allows(Role.OPERATOR),
        "zones": settings.ZOPDAY_ZONES,
    }
    version = digest(context["rows"], page.number, page.paginator.count)
    template = "instances/instance_list.html"
    if request.htmx and request.htmx.target == "instance-table":
        if unchanged := still_shown(request, version):
            return unchanged
        template += "#instance-table"
    context["poll_url"] = poll_url(request, version)
    return render(request, template, context)


@login_required
def instance_row(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """One list row, polled every second while the instance is in a transitional state; once
    settled, "stop polling" (286): the table's own slow poll takes over."""
    instance, _ = instance_for_user(request.user, project_slug, pk)
    values = selectors.instance_table(instance.project).filter(pk=instance.pk)
    response = render(
        request,
        "instances/instance_list.html#instance-row",
        {"row": instance_rows(list(values), project_slug)[0]},
    )
    if instance.is_transitional:
        return response
    return HttpResponseStopPolling(response.content)


@login_required
def instance_new(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
    data = request.POST.copy() if request.method == "POST" else None
    adding = data.get("add") in ("disks", "nics") if data is not None else False
    if data is not None and adding:  # Add disk / Add interface without the page's script
        kind = str(data["add"])
        count = str(data.get(f"{kind}-TOTAL_FORMS", ""))
        row = int(count) if count.isdecimal() else 0
        data[f"{kind}-TOTAL_FORMS"] = str(row + 1)
        row_form = DiskRowForm if kind == "disks" else NicRowForm
        for name, field in row_form.base_fields.items():  # as the script's new row starts
            if field.initial is not None:
                data[f"{kind}-{row}-{name}"] = str(field.initial)
    form = InstanceForm(data, project=project)
    disks = DiskFormSet(data, prefix="disks")
    nics = NicFormSet(data, prefix="nics", form_kwargs={"project": project})
    if adding:
        _not_checked_yet(form, disks, nics)
        context = {"project": project, "role": role, "form": form, "disks": disks, "nics": nics}
        return render(request, "instances/instance_new.html", context)
    # every part checked, so that every mistake shows at once
    valid = all([form.is_valid(), disks.is_valid(), nics.is_valid()])
    if request.method == "POST" and not valid and form.is_valid():
        try:  # what creating it would say of the instance's own fields, said now
            instance_check(project=project, fields=form.cleaned_data)
        except ValidationError as error:
            apply_errors(error, form, {"disks": disks, "nics": nics})
    if request.method == "POST" and valid:
        try:
            instance = instance_create(
                project=project, actor=request.user, request=_instance_request(form, disks, nics)
            )
        except ValidationError as error:
            apply_errors(error, form, {"disks": disks, "nics": nics})
        except ActionRefused as refused:
            form.add_error(None, refused.message)
        else:
            messages.success(request, f"Instance {instance.name} created.")
            return redirect("instance-detail", project_slug=project.slug, pk=instance.pk)
    context = {"project": project, "role": role, "form": form, "disks": disks, "nics": nics}
    return render(request, "instances/instance_new.html", context)


def _not_checked_yet(form: forms.Form, *formsets: forms.BaseFormSet) -> None:
    """Shown as typed, with no mistakes said: the user is still filling the form in (a row
    left empty is skipped when it is sent, as one added by the page's script)."""
    form.errors.clear()
    for formset in formsets:
        for row in formset.forms:
            row.errors.clear()
        formset.non_form_errors().clear()


def _instance_request(
    form: InstanceForm, disks: forms.BaseFormSet, nics: forms.BaseFormSet
) -> InstanceRequest:
    data = form.cleaned_data
    extra_disks = [
        DiskRequest(size_gb=row["size_gb"], bus=row["bus"], name=row.get("name", ""))
        for row in disks.cleaned_data
        if row and not row.get("DELETE")
    ]
    if data.get("cdrom_image"):
        extra_disks.append(DiskRequest(size_gb=0, role=DiskRole.CDROM, image=data["cdrom_image"]))
    fields = {
        name: data[name]
        for name in (
            "name", "zone", "run_strategy", "vcpus", "memory_gb", "sockets", "cores", "threads",
            "bootloader", "secure_boot", "persistent_efi", "vtpm", "user_data_mode",
            "custom_user_data", "root_image", "root_size_gb", "root_bus",
        )
    }  # fmt: skip
    return InstanceRequest(
        **fields,
        ssh_keys=list(data["ssh_keys"]),
        disks=extra_disks,
        nics=[
            NicRequest(
                subnet=row["subnet"],
                ipv4=row["ipv4"],
                ipv6=row["ipv6"],
                mac=row["mac"],
                model=row["model"],
            )
            for row in nics.cleaned_data
            if row
        ],
    )


@login_required
def instance_form_row(request: AuthedRequest, project_slug: str, kind: str) -> HttpResponse:
    """An empty disk or NIC row for the create form ("Add disk", "Add interface")."""
    project, _ = project_for_user(request.user, project_slug, Role.OPERATOR)
    # "index", or the formset's own count (what the page's Add button sends)
    position = request.GET.get("index") or request.GET.get(f"{kind}-TOTAL_FORMS") or "0"
    if not position.isdecimal():
        return HttpResponseBadRequest("index: a whole number, the row's position in the form.")
    index = int(position)
    formset: forms.BaseFormSet
    if kind == "nics":
        formset = NicFormSet(prefix="nics", form_kwargs={"project": project})
    elif kind == "disks":
        formset = DiskFormSet(prefix="disks")
    else:
        raise Http404("The create form has rows of disks and of nics only.")
    row = formset.empty_form
    row.prefix = f"{kind}-{index}"
    return render(
        request,
        "instances/instance_new.html#form-row",
        {"row": row, "kind": kind, "index": index, "total": index + 1},
    )


@login_required
def instance_detail(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    tab = request.GET.get("tab", "overview")
    if tab not in TABS and tab not in TAB_OF:
        tab = "overview"
    context = detail_context(instance, role, tab)
    template = "instances/instance_detail.html"
    if request.htmx and request.htmx.target == "tab-content":
        template += "#tab-content"
    return render(request, template, context)


POWER_BUTTONS = (  # action, label, style, the question it asks first (instances.confirm)
    ("start", "Start", "primary", ""),
    ("shutdown", "Shutdown (ACPI)", "", ""),
    ("force_stop", "Force Shutdown", "danger", "force_stop"),
    ("restart", "Restart", "", ""),
)
POWER_QUESTIONS = {action: asks for action, _, _, asks in POWER_BUTTONS if asks}


def detail_context(instance: Instance, role: Role, tab: str) -> dict[str, object]:
    allowed = instance_allowed_actions(instance, role)
    console_allowed = instance_console_actions(instance, role)
    context: dict[str, object] = {
        "project": instance.project,
        "instance": instance,
        "role": role,
        "allowed": allowed,
        "tab": tab,
        "tabs": TABS,
        "current_tab": TAB_OF.get(tab, tab),
        "sub_views": SUB_VIEWS.get(TAB_OF.get(tab, tab), ()),
        "run_strategies": RunStrategy.choices,
        "power_buttons": [
            {
                "action": action,
                "label": label,
                "style": style,
                "confirm": question(asks, instance) if asks else "",
                "allowed": allowed[action],
            }
            for action, label, style, asks in POWER_BUTTONS
        ],
        "console_allowed": console_allowed,
        "consoles": console_links(instance, console_allowed),
        "machine_facts": machine_facts(instance.backend, instance.machine_id),
    }
    context["panel_version"] = digest(
        instance.power_state,
        instance.last_exit,
        instance.power_message,
        context["machine_facts"],
        context["power_buttons"],
        console_allowed,
    )
    if tab in ("storage", "networking", "user-data") and not is_local_backend(instance.backend):
        context["in_cloud"] = instance.backend  # the VM's job set these up: the tab says so
    elif tab == "overview":
        context["nics"] = nics = list(instance.nics.select_related("subnet", "elastic_ip"))
        context["disks"] = instance.disks.select_related("image")
        context["guest"] = _guest_report(instance)
        context["ssh"] = _ssh(instance, nics)
    elif tab == "storage":
        disks = list(instance.disks.select_related("image").prefetch_related("snapshots"))
        context["disks"] = disks
        context["settling"] = {  # disks with a snapshot the host is working on: their cell polls
            disk.pk for disk in disks if any(s.in_progress for s in disk.snapshots.all())
        }
        context["free_disks"] = instance.project.disks.filter(instance=None, zone=instance.zone)
        context["disk_form"] = DiskAddForm()
        context["isos"] = images_for(instance.project, ImageKind.ISO)
    elif tab == "networking":
        context["nics"] = instance.nics.select_related("subnet", "elastic_ip")
        context["nic_form"] = NicAddForm(instance=instance)
        context["free_eips"] = instance.project.elastic_ips.filter(nic=None)
        context["network_mode"] = _network_mode(instance)
    elif tab == "user-data":
        text = user_data(instance)
        context["user_data"] = text if allowed["view_password"] else user_data_redacted(text)
    elif tab == "events":
        context["events"] = selectors.instance_events(instance)[:100]
    return context


def _guest_report(instance: Instance) -> dict[str, object] | None:
    """The Overview's "Guest agent" row, for an instance on this console's own hosts: the
    agent's report of the guest as it runs now, or why there is none yet."""
    if not is_local_backend(instance.backend):
        return None
    report = GuestReport.objects.filter(instance=instance).first()
    return {
        "report": report if report and report.current_for(instance) else None,
        "error": report.error if report else "",
        "every": settings.ZOPDAY_GUEST_REPORT_SECONDS,
    }


def _ssh(instance: Instance, nics: list[NetworkInterface]) -> dict[str, str] | None:
    """How to reach a local instance's SSH server: its primary address, and from this host
    through the namespace that holds the subnets in bridged mode, and who logs in with what;
    None for cloud VMs."""
    mode = _network_mode(instance)
    if not mode:
        return None
    primary = next((nic for nic in nics if nic.primary), None)
    address = primary.ipv4 or primary.ipv6 if primary else ""
    if not address:
        return {"mode": mode, "command": ""}
    if instance.user_data_mode == UserDataMode.CUSTOM:
        user = "USER"
        how = (
            "USER being a user your custom user data creates; cloud-init gives the selected "
            "SSH keys to the image's default user"
        )
    elif instance.ssh_keys.exists():
        user, how = DEFAULT_USER, "with a key selected on the instance (password logins are off)"
    else:
        user = DEFAULT_USER
        how = (
            f"with the initial password of {DEFAULT_USER}, which project admins read under "
            "Storage > UserData"
        )
    command = f"ssh {user}@{address}"
    host = f"sudo ip netns exec {settings.ZOPDAY_NETNS} {command}" if mode == "bridge" else ""
    return {"mode": mode, "command": command, "host": host, "how": how}


def _network_mode(instance: Instance) -> str:
    """How the hypervisor wires NICs ("bridge": subnets are shared L2 segments; "user": each
    NIC is on its own), or "" for backends without the notion."""
    if not is_local_backend(instance.backend):
        return ""
    return str(getattr(backend_named(instance.backend), "network_mode", ""))


@login_required
def instance_power_panel(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """The state badge and power buttons: polled every second while the state is transitional,
    and slowly while settled (204 No Content while it shows the same; instances.views.polling)."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    context = detail_context(instance, role, tab="")
    unchanged = still_shown(request, str(context["panel_version"]))
    if unchanged and not instance.is_transitional:
        return unchanged
    return render(request, "instances/instance_detail.html#power-panel", context)


POWER_SERVICES = {
    "start": power.instance_start,
    "shutdown": power.instance_shutdown,
    "force_stop": power.instance_force_stop,
    "restart": power.instance_restart,
}


@require_POST
@login_required
def instance_power(request: AuthedRequest, project_slug: str, pk: int, action: str) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    service = POWER_SERVICES.get(action)
    if service is None:
        return HttpResponse(status=404)
    asks = POWER_QUESTIONS.get(action)
    if (
        asks
        and RULES[action](instance, role)
        and (page := asked_first(request, asks, instance, back=detail_url(instance)))
    ):
        return page
    try:
        service(instance=instance, actor=request.user)
    except ActionRefused as refused:
        messages.error(request, refused.message)
    instance.refresh_from_db()
    if request.htmx:
        return render(
            request,
            "instances/instance_detail.html#power-panel",
            detail_context(instance, role, tab=""),
        )
    return redirect("instance-detail", project_slug=project_slug, pk=pk)


@require_POST
@login_required
def instance_run_strategy(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    instance, _ = instance_for_user(request.user, project_slug, pk)
    try:
        instance_set_run_strategy(
            instance=instance, actor=request.user, strategy=request.POST.get("run_strategy", "")
        )
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    except ActionRefused as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, f"Run strategy set to {request.POST['run_strategy']}.")
    return back_to_detail(request, instance)


@require_POST
@login_required
def instance_delete_view(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    back = detail_url(instance)
    if RULES["delete"](instance, role) and (
        page := asked_first(request, "delete_instance", instance, back=back)
    ):
        return page
    try:
        instance_delete(instance=instance, actor=request.user)
    except ActionRefused as refused:
        messages.error(request, refused.message)
        return back_to_detail(request, instance)
    messages.success(request, f"Instance {instance.name} deleted.")
    url = reverse("instance-list", args=[project_slug])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def detail_url(instance: Instance, tab: str = "") -> str:
    url = reverse("instance-detail", args=[instance.project.slug, instance.pk])
    return f"{url}?tab={tab}" if tab else url


def back_to_detail(request: AuthedRequest, instance: Instance, tab: str = "") -> HttpResponse:
    url = detail_url(instance, tab)
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
