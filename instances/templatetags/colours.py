"""`{{ value|colour:"PowerState" }}`: a status's badge colour, from its choice set."""

from django import template

from instances.choices import COLOURS, Colour, colour_of

register = template.Library()


@register.filter
def colour(value: str, choices: str) -> Colour:
    """The colour the named choice set (a class in an app's choices.py) gives this value."""
    by_name = {choice_set.__name__: choice_set for choice_set in COLOURS}
    return colour_of(by_name[choices], value)
