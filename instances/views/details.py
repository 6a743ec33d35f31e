"""The details page: its tabs, the power panel, and the rows' rules each tab shows."""

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Model
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from instances import selectors
from instances.access import instance_for_user
from instances.actions import instance_allowed_actions, instance_console_actions
from instances.allowed import Allowed
from instances.backends import (
    CLUSTER_BACKENDS,
    MachineFact,
    backend_named,
    is_local_backend,
    is_managed_backend,
    machine_facts,
)
from instances.choices import ImageKind, Role, RunStrategy, UserDataMode
from instances.cloudinit import DEFAULT_USER, user_data
from instances.confirm import question
from instances.forms import DiskAddForm, NicAddForm, images_for
from instances.http import AuthedRequest
from instances.models import Disk, GuestReport, Instance, NetworkInterface
from instances.power_operations import POWER_OPERATIONS
from instances.redaction import user_data_redacted
from instances.row_rules import DISK_RULES, NIC_RULES, SNAPSHOT_RULES, row_allowed
from instances.views.consoles import console_links
from instances.views.polling import digest
from instances.views.serial_output import serial_output_section

TABS = ("overview", "storage", "networking", "events")
# Views inside a tab, each at its own ?tab= value: the seed's Storage > UserData.
SUB_VIEWS = {"storage": (("storage", "Disks"), ("user-data", "UserData"))}
TAB_OF = {view: tab for tab, views in SUB_VIEWS.items() for view, _ in views}


@dataclass(frozen=True)
class Row:
    """A tab's row and what may be done to it now (instances.row_rules): its buttons."""

    item: Model
    allowed: dict[str, Allowed]
    snapshots: list["Row"] = field(default_factory=list)


def disk_row(disk: Disk, role: Role) -> Row:
    snapshots = [
        Row(snapshot, row_allowed(SNAPSHOT_RULES, snapshot, role))
        for snapshot in disk.snapshots.all()
    ]
    return Row(disk, row_allowed(DISK_RULES, disk, role), snapshots)


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
                "action": operation.name,
                "label": operation.label,
                "style": operation.style,
                "confirm": question(operation.question, instance) if operation.question else "",
                "allowed": allowed[operation.name],
            }
            for operation in POWER_OPERATIONS
        ],
        "console_allowed": console_allowed,
        "consoles": console_links(instance, console_allowed),
        "machine_facts": machine_facts(instance.backend, instance.machine_id)
        + ([MachineFact("Node", instance.node)] if instance.node else []),
    }
    context["panel_version"] = digest(
        instance.power_state,
        instance.last_exit,
        instance.power_message,
        instance.migration,
        context["machine_facts"],
        context["power_buttons"],
        console_allowed,
    )
    if tab in ("storage", "networking", "user-data") and not is_managed_backend(instance.backend):
        context["in_cloud"] = instance.backend  # the VM's job set these up: the tab says so
    elif tab == "overview":
        context["nics"] = nics = list(instance.nics.select_related("subnet", "elastic_ip"))
        context["disks"] = instance.disks.select_related("image")
        context["guest"] = _guest_report(instance)
        context["ssh"] = _ssh(instance, nics)
        context["serial_output"] = serial_output_section(instance, console_allowed["serial_output"])
    elif tab == "storage":
        disks = list(instance.disks.select_related("image").prefetch_related("snapshots"))
        context["disks"] = disks
        context["disk_rows"] = [disk_row(disk, role) for disk in disks]
        context["settling"] = {  # disks with a snapshot the host is working on: their cell polls
            disk.pk for disk in disks if any(s.in_progress for s in disk.snapshots.all())
        }
        context["free_disks"] = instance.project.disks.filter(instance=None, zone=instance.zone)
        context["disk_form"] = DiskAddForm()
        context["isos"] = images_for(instance.project, ImageKind.ISO)
    elif tab == "networking":
        nics = list(instance.nics.select_related("subnet", "elastic_ip"))
        context["nics"] = nics
        context["nic_rows"] = [Row(nic, row_allowed(NIC_RULES, nic, role)) for nic in nics]
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
    """The Overview's "Guest agent" row, for an instance on this console's own hosts or a
    cluster: the agent's report of the guest as it runs now, or why there is none yet."""
    if not (is_local_backend(instance.backend) or instance.backend in CLUSTER_BACKENDS):
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


def detail_url(instance: Instance, tab: str = "") -> str:
    url = reverse("instance-detail", args=[instance.project.slug, instance.pk])
    return f"{url}?tab={tab}" if tab else url


def back_to_detail(request: AuthedRequest, instance: Instance, tab: str = "") -> HttpResponse:
    url = detail_url(instance, tab)
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
