"""The instance list, the create form, the run strategy and deleting an instance."""

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

from instances import actions, selectors
from instances.access import instance_for_user, project_for_user
from instances.choices import (
    POWER_TRANSITIONAL,
    DiskRole,
    PowerState,
    Role,
)
from instances.confirm import asked_first
from instances.errors import ActionRefused
from instances.filters import InstanceFilterSet
from instances.forms import (
    DiskFormSet,
    DiskRowForm,
    InstanceForm,
    NicFormSet,
    NicRowForm,
    apply_errors,
)
from instances.http import AuthedRequest
from instances.services.instances import (
    DiskRequest,
    InstanceRequest,
    NicRequest,
    instance_check,
    instance_create,
    instance_delete,
    instance_set_run_strategy,
)
from instances.views.details import back_to_detail, detail_url
from instances.views.polling import digest, poll_url, still_shown

PAGE_SIZE = 50


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
    context["version"] = version  # keys the rendered rows in the cache: the same rows, once
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
    if data.get("container_image"):
        container = DiskRequest(size_gb=0, role=DiskRole.CONTAINER, image=data["container_image"])
        extra_disks.append(container)
    fields = {
        name: data[name]
        for name in (
            "name", "zone", "run_strategy", "vcpus", "memory_gb", "sockets", "cores", "threads",
            "bootloader", "secure_boot", "persistent_efi", "vtpm", "user_data_mode",
            "custom_user_data", "root_image", "root_size_gb", "root_bus", "cluster",
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
    if actions.delete(instance, role) and (
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
