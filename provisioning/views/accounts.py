"""A project's cloud accounts: the list, adding one, and testing its connection."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from instances.access import object_for_user, project_for_user
from instances.choices import Role
from instances.forms import apply_errors
from instances.http import AuthedRequest
from provisioning.forms import CloudAccountForm
from provisioning.models import CloudAccount
from provisioning.services.accounts import account_check, account_create


@login_required
def account_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    form = CloudAccountForm(user=request.user)
    if request.method == "POST":
        if not role.allows(Role.ADMIN):
            raise PermissionDenied("Adding a cloud account needs the admin role.")
        form = CloudAccountForm(request.POST, user=request.user)
        if form.is_valid():
            try:
                account_create(project=project, actor=request.user, **form.cleaned_data)
            except ValidationError as error:
                apply_errors(error, form, {})
            else:
                messages.success(request, "Cloud account added.")
                return redirect("provisioning-accounts", project.slug)
    return render(
        request,
        "provisioning/account_list.html",
        {"project": project, "accounts": CloudAccount.objects.filter(project=project),
         "form": form, "can_add": role.allows(Role.ADMIN),
         "can_check": role.allows(Role.OPERATOR)},
    )  # fmt: skip


@login_required
@require_POST
def account_test(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    account, _ = object_for_user(
        CloudAccount.objects.all(), request.user, Role.OPERATOR, pk=pk, project__slug=project_slug
    )
    account = account_check(account=account, actor=request.user)
    if request.htmx:
        return render(
            request, "provisioning/account_list.html#account-row",
            {"account": account, "project": account.project, "can_check": True},
        )  # fmt: skip
    messages.info(request, account.last_check_message)
    return redirect("provisioning-accounts", project_slug)
