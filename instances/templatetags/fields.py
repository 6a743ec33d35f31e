"""A form field's input tied to what is said about it, for screen readers."""

from django import template
from django.forms import BoundField
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def described(field: BoundField) -> SafeString:
    """The field's widget; with errors, marked invalid and described by its help text and its
    first error (partials/field.html gives them these ids)."""
    if not field.errors:
        return field.as_widget()
    ids = [f"{field.auto_id}_helptext"] if field.help_text and field.auto_id else []
    ids.append(f"{field.html_name}-error")
    return field.as_widget(attrs={"aria-invalid": "true", "aria-describedby": " ".join(ids)})
