"""The questions destructive actions ask before they run, and the page that asks them.

With scripts, htmx asks in a dialog (hx-confirm) and the form sends the answer with itself
(hx-vals). Without scripts, or from a page older than the question, the view gets no answer:
`asked_first` then returns a page that asks the same question and posts the same form again
with the answer. So nothing destructive runs unasked, and nobody is left unable to answer."""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import reswap, retarget

QUESTIONS: dict[str, Callable[[Any], str]] = {
    "force_stop": lambda instance: (
        "Force Shutdown cuts the power at once: unsaved data in the guest is lost. Continue?"
    ),
    "delete_instance": lambda instance: (
        f"Delete {instance.name}? Its root disk is deleted; secondary disks are kept."
    ),
    "delete_disk": lambda disk: (
        f"Delete {disk.name}? Its data and its snapshots are gone for good."
    ),
    "delete_snapshot": lambda snapshot: (
        f"Delete snapshot {snapshot.name} of {snapshot.disk.name}? It cannot be brought back."
    ),
    "revert": lambda snapshot: (
        f"Reverting {snapshot.disk.name} to {snapshot.name} discards everything written to it "
        "since the snapshot. Continue?"
    ),
    "link_down": lambda nic: (
        f"{nic.name} is the primary interface: taking its link down can cut the instance off "
        "the network. Continue?"
    ),
    "teardown": lambda job: (
        f"Tear down {job.name}? Every cloud resource its pipeline created is deleted, its VMs "
        "included."
    ),
}


def question(name: str, target: object) -> str:
    return QUESTIONS[name](target)


def asked_first(
    request: HttpRequest, name: str, target: object, *, back: str, field: str = "confirm"
) -> HttpResponse | None:
    """None when the form carries the answer (field=1); otherwise the page asking question
    `name` about target, whose Continue posts the same form with the answer and whose Cancel
    goes back."""
    if request.POST.get(field) == "1":
        return None
    return question_page(request, name, target, back=back, field=field)


def question_page(
    request: HttpRequest, name: str, target: object, *, back: str, field: str = "confirm"
) -> HttpResponse:
    carried = [
        (key, value)
        for key, values in request.POST.lists()
        if key not in ("csrfmiddlewaretoken", field)
        for value in values
    ]
    context = {
        "question": question(name, target),
        "action": request.path,
        "carried": carried,
        "field": field,
        "back": back,
    }
    response = render(request, "confirm.html", context)
    if getattr(request, "htmx", False):  # a stale page's form: the question takes the page
        response = reswap(retarget(response, "body"), "innerHTML")
    return response
