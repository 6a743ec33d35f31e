"""Container disk images on the Images page: an operator registers one by its OCI reference."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from instances.access import project_for_user
from instances.choices import Role
from instances.forms import ContainerImageForm, apply_errors
from instances.http import AuthedRequest
from instances.services.container_disks import container_image_add
from instances.views.catalog import image_page


@require_POST
@login_required
def container_image_create(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
    form = ContainerImageForm(request.POST, prefix="container")
    if form.is_valid():
        try:
            image = container_image_add(project=project, actor=request.user, **form.cleaned_data)
        except ValidationError as error:
            apply_errors(error, form, {})
        else:
            messages.success(
                request, f"{image.name} registered: its first instance's host pulls it."
            )
            return redirect("image-list", project_slug=project.slug)
    return image_page(request, project, role, container_form=form)
