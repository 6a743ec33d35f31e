"""`{{ target|question:"name" }}`: the words of a destructive action's confirmation dialog,
the same as its no-script confirmation page asks (instances.confirm)."""

from django import template

from instances.confirm import question as asked

register = template.Library()


@register.filter
def question(target: object, name: str) -> str:
    return asked(name, target)
