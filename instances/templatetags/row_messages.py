"""Errors of a table row's action shown at that row rather than at the top of the page.

A view that knows the row an action was asked from tags its error message with `row_tags(row)`;
the row's template shows it with `{% action_errors "disk-" disk.pk %}`, and the page's message list
(`messages|page_messages`) leaves it out.
"""

from collections.abc import Iterable

from django import template
from django.contrib.messages.storage.base import Message
from django.utils.html import format_html_join

register = template.Library()

AT_ROW = "at-row"


def row_tags(row: str) -> str:
    """The extra tags of a message shown at `row` ("" when it belongs at the top)."""
    return f"{AT_ROW} row-{row}" if row else ""


@register.filter
def page_messages(messages: Iterable[Message]) -> list[Message]:
    """The messages the top of the page shows: all but those of a row."""
    return [m for m in messages if AT_ROW not in m.extra_tags.split()]


@register.simple_tag(takes_context=True)
def action_errors(context: template.Context, *parts: object) -> str:
    """The errors of the row's last action, each in a <p class="error" role="alert">; the row
    is named by its parts joined (`{% action_errors "disk-" disk.pk %}`)."""
    row = "".join(map(str, parts))
    tag = f"row-{row}"
    mine = [m for m in context.get("messages") or () if tag in m.extra_tags.split()]
    return format_html_join(
        "",
        '<p class="error row-error" role="alert" data-row-error="{}">{}</p>',
        ((row, m) for m in mine),
    )
