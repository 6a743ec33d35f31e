"""Imports from a URL on the Images page: start one, the polled part that shows their progress,
and Cancel, Retry and Dismiss (POST, operators)."""

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from instances.access import image_import_for_user, project_for_user
from instances.choices import Role
from instances.errors import ActionRefused
from instances.forms import ImageImportForm, apply_errors
from instances.http import AuthedRequest
from instances.services import image_imports
from instances.views.catalog import image_catalog, image_page


@require_POST
@login_required
def url_import_start(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
    form = ImageImportForm(request.POST, prefix="import")
    if form.is_valid():
        try:
            image_import = image_imports.image_import_start(
                project=project, actor=request.user, **form.cleaned_data
            )
        except ValidationError as error:
            apply_errors(error, form, {})
        else:
            messages.success(request, f"Importing {image_import.name}: its progress shows below.")
            return redirect("image-list", project_slug=project.slug)
    return image_page(request, project, role, import_form=form)


@require_GET
@login_required
def url_import_panel(request: AuthedRequest, project_slug: str) -> HttpResponse:
    """The images and imports, polled every second while an import runs; once none does,
    the last answer stops the polling (286)."""
    project, role = project_for_user(request.user, project_slug)
    context = {"project": project, "can_edit": role.allows(Role.OPERATOR),
               **image_catalog(project)}  # fmt: skip
    response = render(request, "instances/image_list.html#image-catalog", context)
    if context["importing"]:
        return response
    return HttpResponseStopPolling(response.content)


def _act(work: Callable[..., None], done: str) -> Callable[[AuthedRequest, str, int], HttpResponse]:
    @require_POST
    @login_required
    def view(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
        image_import, _ = image_import_for_user(request.user, project_slug, pk, Role.OPERATOR)
        try:
            work(image_import=image_import, actor=request.user)
        except ActionRefused as refused:
            messages.error(request, refused.message)
        else:
            messages.success(request, done.format(name=image_import.name))
        return redirect("image-list", project_slug=project_slug)

    return view


url_import_cancel = _act(image_imports.image_import_cancel, "Cancelling the import of {name}.")
url_import_retry = _act(image_imports.image_import_retry, "Importing {name} again.")
url_import_dismiss = _act(image_imports.image_import_dismiss, "Import of {name} dismissed.")
