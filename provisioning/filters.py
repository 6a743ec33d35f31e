"""FilterSets of the provisioning app, shared by its list pages and the API."""

import django_filters

from instances.filters import ListFilterSet


class JobFilterSet(ListFilterSet):
    """The job list's filters: ?status= (the project one is an access check, not a filter)."""

    status = django_filters.CharFilter(strip=False)
