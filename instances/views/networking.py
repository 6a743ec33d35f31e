"""The Networking tab's actions, one view each, at nics/<action>/ (NIC_VIEWS)."""

from functools import partial

from django.http import HttpResponse

from instances import actions
from instances.choices import Role
from instances.forms import NicAddForm
from instances.http import AuthedRequest
from instances.models import ElasticIP, Instance, NetworkInterface
from instances.services import network
from instances.views.tab_actions import TabView, asked, chosen_in, form_run, run, tab_actions

TAB = "networking"


def _nic(request: AuthedRequest, instance: Instance) -> NetworkInterface:
    return chosen_in(instance.nics.all(), request, "nic", "an interface")


def _eip(request: AuthedRequest, instance: Instance) -> ElasticIP:
    return chosen_in(instance.project.elastic_ips.all(), request, "eip", "an Elastic IP")


def nic_add(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return form_run(
        request, instance, role, TAB,
        "Interface added; it appears in the guest at the next start.",
        NicAddForm(request.POST, instance=instance),
        lambda data: network.nic_add(
            instance=instance, actor=request.user, **{k: v for k, v in data.items() if v}
        ),
    )  # fmt: skip


def nic_remove(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return _run(
        request, instance, "Interface removed.",
        lambda: network.nic_remove(nic=_nic(request, instance), actor=request.user),
    )  # fmt: skip


def nic_set_link(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    up = request.POST.get("up") == "1"
    if not up:
        primary = instance.nics.filter(index=0)
        page = asked(
            request, instance, role, actions.configure, TAB, "link_down",
            lambda: chosen_in(primary, request, "nic", "an interface"), field="confirm_primary",
        )  # fmt: skip
        if page:
            return page
    return _run(
        request, instance, "Link state changed.",
        lambda: network.nic_set_link(
            nic=_nic(request, instance), actor=request.user, up=up,
            confirm_primary=request.POST.get("confirm_primary") == "1",
        ),
    )  # fmt: skip


def eip_associate(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    def associate() -> None:
        if request.POST.get("eip"):
            eip = _eip(request, instance)
            network.eip_associate(eip=eip, nic=_nic(request, instance), actor=request.user)
        else:
            network.eip_allocate_and_associate(nic=_nic(request, instance), actor=request.user)

    return _run(request, instance, "Elastic IP associated.", associate)


def eip_release(request: AuthedRequest, instance: Instance, role: Role) -> HttpResponse:
    return _run(
        request, instance, "Elastic IP released.",
        lambda: network.eip_release(eip=_eip(request, instance), actor=request.user),
    )  # fmt: skip


NIC_VIEWS: dict[str, TabView] = {
    "add": nic_add,
    "remove": nic_remove,
    "link": nic_set_link,
    "associate-eip": eip_associate,
    "release-eip": eip_release,
}


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


_run = partial(run, tab=TAB, row_of=_nic_row_of)
nic_action = tab_actions(NIC_VIEWS)
