"""Project catalog pages: subnets with their IPAM usage, SSH keys, images."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST

from instances.access import (
    image_for_user,
    project_for_user,
    ssh_key_for_user,
    subnet_for_user,
)
from instances.choices import IMPORT_TRANSITIONAL, ImageKind, Role
from instances.errors import ActionRefused
from instances.forms import (
    ContainerImageForm,
    ImageImportForm,
    ImageUploadForm,
    SSHKeyForm,
    SubnetForm,
    apply_errors,
)
from instances.http import AuthedRequest
from instances.models import Image, ImageImport, Project
from instances.services import images, keys, network


@login_required
def subnet_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    form = SubnetForm(request.POST or None)
    if request.method == "POST":
        project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
        if form.is_valid():
            try:
                subnet = network.subnet_create(
                    project=project, actor=request.user, **form.cleaned_data
                )
            except ValidationError as error:
                apply_errors(error, form, {})
            else:
                messages.success(request, f"Subnet {subnet.name} created.")
                return redirect("subnet-list", project_slug=project.slug)
    subnets = project.subnets.annotate(
        leased=Count("leases", distinct=True), attached=Count("nics", distinct=True)
    )
    rows = []
    for subnet in subnets:
        usable = sum(
            max(net.num_addresses - (3 if net.version == 4 else 2), 0)
            for net in (subnet.network_v4, subnet.network_v6)
            if net is not None
        )
        rows.append((subnet, usable))
    context = {"project": project, "role": role, "rows": rows, "form": form,
               "can_edit": role.allows(Role.OPERATOR)}  # fmt: skip
    return render(request, "instances/subnet_list.html", context)


@require_POST
@login_required
def subnet_delete(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    subnet, _ = subnet_for_user(request.user, project_slug, pk, Role.OPERATOR)
    try:
        network.subnet_delete(subnet=subnet, actor=request.user)
    except ActionRefused as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, f"Subnet {subnet.name} deleted.")
    return redirect("subnet-list", project_slug=project_slug)


@login_required
def ssh_key_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    form = SSHKeyForm(request.POST or None)
    if request.method == "POST":
        project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
        if form.is_valid():
            try:
                key = keys.ssh_key_add(project=project, actor=request.user, **form.cleaned_data)
            except ValidationError as error:
                apply_errors(error, form, {})
            else:
                messages.success(request, f"Key {key.name} added ({key.fingerprint}).")
                return redirect("ssh-key-list", project_slug=project.slug)
    context = {"project": project, "role": role, "keys": project.ssh_keys.all(), "form": form,
               "can_edit": role.allows(Role.OPERATOR)}  # fmt: skip
    return render(request, "instances/ssh_key_list.html", context)


@require_POST
@login_required
def ssh_key_delete(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    key, _ = ssh_key_for_user(request.user, project_slug, pk, Role.OPERATOR)
    keys.ssh_key_remove(key=key, actor=request.user)
    messages.success(request, f"Key {key.name} removed.")
    return redirect("ssh-key-list", project_slug=project_slug)


@csrf_exempt  # checked in _image_upload, after the role: the token is read with the upload
@login_required
def image_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    if request.method != "POST":
        return image_page(request, project, role)
    # before the body is read: a viewer's upload is refused before any of it is stored
    project, role = project_for_user(request.user, project_slug, Role.OPERATOR)
    return _image_upload(request, project, role)


@csrf_protect
def _image_upload(request: AuthedRequest, project: Project, role: Role) -> HttpResponse:
    form = ImageUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            image = images.image_upload(
                project=project, actor=request.user, upload=form.cleaned_data.pop("file"),
                **form.cleaned_data,
            )  # fmt: skip
        except ValidationError as error:
            apply_errors(error, form, {})
        else:
            messages.success(request, _uploaded_message(image))
            return redirect("image-list", project_slug=project.slug)
    return image_page(request, project, role, form=form)


def image_page(
    request: AuthedRequest,
    project: Project,
    role: Role,
    form: ImageUploadForm | None = None,
    import_form: ImageImportForm | None = None,
    container_form: ContainerImageForm | None = None,
) -> HttpResponse:
    """The Images page: the images, the imports from a URL, and (for operators) the forms."""
    context = {"project": project, "role": role, "form": form or ImageUploadForm(),
               "import_form": import_form or ImageImportForm(prefix="import"),
               "container_form": container_form or ContainerImageForm(prefix="container"),
               "can_edit": role.allows(Role.OPERATOR),
               "upload_limit_gb": settings.ZOPDAY_IMAGE_UPLOAD_MAX_GB,
               **image_catalog(project)}  # fmt: skip
    return render(request, "instances/image_list.html", context)


def image_catalog(project: Project) -> dict[str, object]:
    """What the polled part of the Images page shows: the images and the recent imports."""
    imports = list(ImageImport.objects.filter(project=project)[:20])
    return {
        "images": Image.objects.filter(Q(project=project) | Q(project=None)).select_related(
            "project"
        ),
        "imports": imports,
        "importing": any(item.status in IMPORT_TRANSITIONAL for item in imports),
        "imports_per_project": settings.ZOPDAY_IMPORTS_PER_PROJECT,
    }


def _uploaded_message(image: Image) -> str:
    if image.kind == ImageKind.ISO:
        return (
            f"Image {image.name} registered: choose it as a new instance's CD-ROM, or insert it "
            "in an instance's CD-ROM drive on its Storage tab."
        )
    return f"Image {image.name} registered (root disks of {image.min_disk_gb} GB or more)."


@require_POST
@login_required
def image_delete(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    image, _ = image_for_user(request.user, project_slug, pk, Role.OPERATOR)
    try:
        images.image_remove(image=image, actor=request.user)
    except ActionRefused as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, f"Image {image.name} removed.")
    return redirect("image-list", project_slug=project_slug)
