"""Images in the admin: a file is registered only once qemu-img, told no format, reads it as a
standalone image of its kind; and a kind, once registered, never changes."""

from pathlib import PurePosixPath
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from instances.admin_scope import ProjectScopedAdmin
from instances.choices import ImageKind
from instances.models import Image
from instances.services.images import image_file_check

FILE_KINDS = (ImageKind.QCOW2, ImageKind.ISO)


class ImageAdminForm(forms.ModelForm):
    """Checks the file of a qcow2 or ISO image whenever its path or kind is set."""

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        image: Image = self.instance
        kind = cleaned.get("kind", image.kind)
        changed = {"path", "kind"} & set(self.changed_data) or image._state.adding
        if kind not in FILE_KINDS or not changed or self.errors:
            return cleaned
        path = cleaned.get("path", image.path)
        field = "path" if "path" in self.fields else None
        if not path:
            self.add_error(field, "A qcow2 or ISO image is a file: a superuser gives its path.")
            return cleaned
        if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
            return cleaned  # outside the images folder: the model refuses it, unread
        try:
            image_file_check(Image(path=path).file, kind)
        except ValidationError as error:
            self.add_error(field, error.message_dict["file"])
        return cleaned


@admin.register(Image)
class ImageAdmin(ProjectScopedAdmin):
    form = ImageAdminForm
    list_display = ["name", "kind", "os_type", "project", "min_disk_gb", "created_at"]
    list_filter = ["kind", "os_type", "project"]
    search_fields = ["name", "path", "reference", "description"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """Where an image's file lives is the upload's or a superuser's to say: a path is a file
        of the host, and another project's upload is a path too. Its kind is fixed, for all."""
        fixed = [*super().get_readonly_fields(request, obj), *(["kind"] if obj else [])]
        if request.user.is_superuser:
            return fixed
        return [*fixed, "path", "reference"]

    def get_form(  # type: ignore[override]
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        if not request.user.is_superuser and "project" in form.base_fields:
            form.base_fields["project"].required = True  # shared images are a superuser's
        return form
