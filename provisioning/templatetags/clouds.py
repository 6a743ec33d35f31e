"""The `cloud_label` filter: a provider's name as its cloud in the registry says it ("AWS")."""

from django import template

from provisioning.clouds import CLOUDS

register = template.Library()


@register.filter
def cloud_label(provider: str) -> str:
    cloud = CLOUDS.get(provider)
    return cloud.label if cloud else provider
