"""What the Storage and Networking tabs' actions share. Each posts, calls one service, and
sends the user back to the tab with a message saying what happened or what to fix; the tabs'
own forms (a new disk, a new interface) come back with each mistake at its field."""

from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from instances.access import instance_for_user
from instances.allowed import Allowed
from instances.choices import Role
from instances.confirm import question_page
from instances.errors import ActionRefused
from instances.forms import apply_errors
from instances.http import AuthedRequest
from instances.models import Instance
from instances.selectors import M, chosen
from instances.templatetags.row_messages import row_tags
from instances.views.details import back_to_detail, detail_context, detail_url

T = TypeVar("T")
TabView = Callable[[AuthedRequest, Instance, Role], HttpResponse]
RowOf = Callable[[Instance, AuthedRequest], str]

TAB_FORMS = {"storage": "disk_form", "networking": "nic_form"}  # detail_context's names


def tab_actions(views: dict[str, TabView]) -> Callable[..., HttpResponse]:
    """The view of POST <tab>/<action>/: the instance as the user's role in its project lets
    them see it, then the action's own view (404 for a name the tab has none for)."""

    @require_POST
    @login_required
    def action_view(
        request: AuthedRequest, project_slug: str, pk: int, action: str
    ) -> HttpResponse:
        instance, role = instance_for_user(request.user, project_slug, pk)
        view = views.get(action)
        if view is None:
            return HttpResponse(status=404)
        return view(request, instance, role)

    return action_view


def run(
    request: AuthedRequest,
    instance: Instance,
    done: str,
    call: Callable[[], object],
    *,
    tab: str,
    row_of: RowOf,
) -> HttpResponse:
    """Call the action; back to the tab with what happened. An error is shown at the row the
    action was asked from (row_of, looked up only then; templatetags.row_messages)."""
    try:
        call()
    except ValidationError as error:
        messages.error(
            request, " ".join(error.messages), extra_tags=row_tags(row_of(instance, request))
        )
    except ActionRefused as refused:
        messages.error(request, refused.message, extra_tags=row_tags(row_of(instance, request)))
    else:
        messages.success(request, done)
    return back_to_detail(request, instance, tab)


def form_run(
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


def asked(
    request: AuthedRequest,
    instance: Instance,
    role: Role | None,
    rule: Callable[[Instance, Role | None], Allowed],
    tab: str,
    question: str,
    target: Callable[[], T],
    row_rule: Callable[[T, Role | None], Allowed] | None = None,
    field: str = "confirm",
) -> HttpResponse | None:
    """Without the answer in the form: the page asking the question first, or, when the rule
    (or the target row's) refuses the action, its reason (the action is not tried: it reads the
    instance again, and what changed since must not let it run unasked). A target the form
    does not name is left to the action's own message."""
    if request.POST.get(field) == "1":
        return None
    if not (allowed := rule(instance, role)):
        return _refused(request, instance, tab, allowed)
    try:
        item = target()
    except ValidationError:
        return None
    if row_rule is not None and not (allowed := row_rule(item, role)):
        return _refused(request, instance, tab, allowed)
    return question_page(request, question, item, back=detail_url(instance, tab), field=field)


def _refused(
    request: AuthedRequest, instance: Instance, tab: str, allowed: Allowed
) -> HttpResponse:
    messages.error(request, allowed.reason)
    return back_to_detail(request, instance, tab)


def whole_number(request: AuthedRequest, name: str) -> int:
    try:
        return int(request.POST.get(name, ""))
    except ValueError:
        raise ValidationError(f"Enter a whole number for {name.replace('_', ' ')}.") from None


def chosen_in(rows: QuerySet[M], request: AuthedRequest, name: str, what: str) -> M:
    """The row the form's select named, or a message when it named none of rows."""
    try:
        pk = int(request.POST.get(name, ""))
    except ValueError:
        pk = 0
    return chosen(rows, pk, name, f"Choose {what}.")
