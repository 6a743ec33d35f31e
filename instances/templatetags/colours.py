"""`{{ value|colour:"PowerState" }}`: a status's badge colour, from its choice set."""

from functools import cache

from django import template
from django.db import models

from instances.choices import COLOURS, Colour, colour_of

register = template.Library()


@cache
def _choice_set(name: str) -> type[models.TextChoices]:
    """Looked up once: every app's choice sets are registered before a page renders."""
    return next(choice_set for choice_set in COLOURS if choice_set.__name__ == name)


@register.filter
def colour(value: str, choices: str) -> Colour:
    """The colour the named choice set (a class in an app's choices.py) gives this value."""
    return colour_of(_choice_set(choices), value)
