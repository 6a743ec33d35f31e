"""Checking a cluster: can the console sign in, does KubeVirt answer, which zones it offers."""

from django.conf import settings
from django.utils import timezone

from instances.backends.kubevirt.connection import (
    ClusterAccess,
    api_client,
    cluster_zones,
    refusal,
)
from instances.models import Cluster


def cluster_access(cluster: Cluster) -> ClusterAccess:
    return ClusterAccess(cluster.api_url, cluster.token, cluster.ca_certificate)


def cluster_check(cluster: Cluster) -> str:
    """Reads the cluster's zones into it; "" when it answered, else what is wrong (kept in
    last_error, the zones as they were)."""
    api = api_client(cluster_access(cluster), settings.RUN_DIR / "clusters")
    try:
        with api:
            zones = cluster_zones(api)
    except Exception as error:  # the client raises urllib3's and its own errors
        problem = refusal(error, cluster.api_url).message
        Cluster.objects.filter(pk=cluster.pk).update(last_error=problem, checked_at=timezone.now())
        cluster.last_error = problem
        return problem
    cluster.zones, cluster.last_error, cluster.checked_at = zones, "", timezone.now()
    cluster.save(update_fields=["zones", "last_error", "checked_at"])
    return ""
