"""Clusters for the KubeVirt backend: where each machine runs, and checking a cluster (can the
console sign in, does KubeVirt answer, which zones it offers)."""

from collections.abc import Sequence

from django.conf import settings
from django.utils import timezone

from instances.backends.kubevirt.backend import KubevirtBackend, Location
from instances.backends.kubevirt.connection import (
    ClusterAccess,
    api_client,
    cluster_zones,
    refusal,
)
from instances.backends.kubevirt.manifests import Placement
from instances.image_links import disk_image_url
from instances.models import Cluster, Instance


def cluster_access(cluster: Cluster) -> ClusterAccess:
    return ClusterAccess(cluster.api_url, cluster.token, cluster.ca_certificate)


def locate(machine_id: str) -> Location | None:
    """Where an instance's machine runs: its cluster, its project's namespace, its zone."""
    pk = machine_id.removeprefix("i-")
    if not pk.isdecimal():
        return None
    instance = (
        Instance.objects.select_related("cluster", "project")
        .filter(pk=int(pk), cluster__isnull=False)
        .first()
    )
    if instance is None or instance.cluster is None:
        return None
    cluster = instance.cluster
    placement = Placement(
        namespace=cluster.namespace_for(instance.project.slug),
        run_strategy=instance.run_strategy,
        zone=instance.zone,
        kernel_image=cluster.kernel_image,
    )
    return Location(cluster.name, cluster_access(cluster), placement)


def all_clusters() -> Sequence[ClusterAccess]:
    return [cluster_access(cluster) for cluster in Cluster.objects.all()]


def kubevirt_backend() -> KubevirtBackend:
    return KubevirtBackend(
        locate, all_clusters, settings.RUN_DIR / "clusters", image_url=disk_image_url
    )


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
    cluster.zones, cluster.capacity = list(zones), zones
    cluster.last_error, cluster.checked_at = "", timezone.now()
    cluster.save(update_fields=["zones", "capacity", "last_error", "checked_at"])
    return ""
