"""FilterSets shared by the list pages and the API: one reading of each list's filters."""

import ipaddress
from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from instances.models import NetworkInterface


class ListFilterSet(django_filters.FilterSet):
    """Filters that cannot be read (a NUL from a page's query string) match nothing, as an
    unknown state does, rather than being dropped and matching everything."""

    def filter_queryset(self, queryset: QuerySet[Any, Any]) -> QuerySet[Any, Any]:
        if self.errors:
            return queryset.none()
        return super().filter_queryset(queryset)

    def get_form_class(self) -> type:
        """Built once per FilterSet, not per request (forms copy their fields anyway)."""
        if type(self) not in _FORM_CLASSES:
            _FORM_CLASSES[type(self)] = super().get_form_class()
        return _FORM_CLASSES[type(self)]


_FORM_CLASSES: dict[type, type] = {}


class InstanceFilterSet(ListFilterSet):
    """The instance list's filters: the list page passes ?q=, the API its ?search= as q."""

    state = django_filters.CharFilter(field_name="power_state", strip=False)
    zone = django_filters.CharFilter(strip=False)
    subnet = django_filters.CharFilter(method="filter_subnet", strip=False)
    q = django_filters.CharFilter(method="filter_search", strip=False)

    def filter_queryset(self, queryset: QuerySet[Any, Any]) -> QuerySet[Any, Any]:
        """Ordered by name; the NIC filters are subqueries, not joins, so no row repeats and
        no DISTINCT keeps the count and the page from using the (project, name) index."""
        return super().filter_queryset(queryset).order_by("name")

    def filter_subnet(self, queryset: QuerySet[Any, Any], name: str, value: str) -> QuerySet:
        """An id from the filter's select; anything else names no subnet."""
        if not value.isdecimal():
            return queryset.none()
        return queryset.filter(pk__in=_with_nics(Q(subnet_id=int(value))))

    def filter_search(self, queryset: QuerySet[Any, Any], name: str, value: str) -> QuerySet:
        return queryset.filter(_search(value.strip()))


def _with_nics(nics: Q) -> QuerySet:
    """The ids of the instances with a NIC matching `nics`."""
    return NetworkInterface.objects.filter(nics).values("instance_id")


def _search(term: str) -> Q:
    """Part of the name, or a whole MAC or IP address, private or Elastic (inet columns take
    only addresses)."""
    nics = Q(mac__iexact=term)
    try:
        address = ipaddress.ip_address(term)
    except ValueError:
        return Q(name__icontains=term) | Q(pk__in=_with_nics(nics))
    nics |= Q(**{f"ipv{address.version}": str(address)})
    if address.version == 4:
        nics |= Q(elastic_ip__address=str(address))
    return Q(name__icontains=term) | Q(pk__in=_with_nics(nics))
