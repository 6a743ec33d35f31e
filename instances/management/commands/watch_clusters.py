"""`manage.py watch_clusters`: follow every cluster's VirtualMachines (one watch each) and keep
the state of the instances on them true. Clusters added later are picked up within a minute."""

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from instances.models import Cluster
from instances.services.cluster_watch import ClusterWatch, watch_cluster

RESCAN_SECONDS = 60


class Command(BaseCommand):
    help = "Follow the clusters' VirtualMachines and keep their instances' power state true."

    def handle(self, *args: Any, **options: Any) -> None:
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        watches: dict[int, tuple[tuple[str, ...], ClusterWatch]] = {}
        try:
            while not done.is_set():
                clusters = {cluster.pk: cluster for cluster in Cluster.objects.all()}
                for pk in list(watches):
                    if pk not in clusters or _signature(clusters[pk]) != watches[pk][0]:  # edited
                        watches.pop(pk)[1].stop()
                for pk, cluster in clusters.items():
                    if pk not in watches:
                        self.stdout.write(f"watching cluster {cluster} at {cluster.api_url}")
                        watches[pk] = (
                            _signature(cluster),
                            watch_cluster(cluster, settings.RUN_DIR / "clusters"),
                        )
                done.wait(RESCAN_SECONDS)
        except KeyboardInterrupt:
            pass
        for _, watcher in watches.values():
            watcher.stop()


def _signature(cluster: Cluster) -> tuple[str, ...]:
    """What signing in to the cluster takes: a new token or address means a new watch."""
    return (cluster.api_url, cluster.token_encrypted, cluster.ca_certificate)
