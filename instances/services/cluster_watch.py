"""Following what KubeVirt does to the console's machines, one watch per cluster.

KubeVirt enforces the run strategies: it reruns a crashed VMI under Always, leaves a guest that
powered itself off stopped under RerunOnFailure. The console learns of it from one watch on the
cluster's VirtualMachines (the ones it labelled), not by asking after each instance. A change
it reads is checked against the VM as it is now (a GET: watches lag) before the instance's state
is written, and the state a power request claimed is left to its task, except to finish it.
"""

import logging
import threading
from pathlib import Path
from typing import Any

from django import db
from django.db.models import F
from kubernetes import client, watch

from instances.backends.kubevirt.connection import TIMEOUT, api_client
from instances.backends.kubevirt.manifests import MANAGED_BY
from instances.backends.kubevirt.objects import KUBEVIRT
from instances.choices import POWER_TRANSITIONAL, LastExit, PowerState
from instances.models import Cluster, Instance
from instances.services.clusters import cluster_access
from instances.services.machines import settle

log = logging.getLogger(__name__)
Body = dict[str, Any]
SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
WATCH_SECONDS = 300  # a watch is renewed from its last version this often
RETRY_SECONDS = 5  # after the cluster failed to answer
FAILED_STATUSES = frozenset({
    "CrashLoopBackOff", "ErrorUnschedulable", "ErrImagePull", "ImagePullBackOff",
    "ErrorPvcNotFound", "DataVolumeError", "Unknown",
})  # fmt: skip


def power_state_of(printable: str) -> str | None:
    """The console's settled state for a VM's printableStatus; None while KubeVirt is between
    two (Starting, Stopping, Provisioning...): the next status settles it."""
    if printable in ("Running", "Migrating", "Paused"):
        return PowerState.RUNNING
    if printable == "Stopped":
        return PowerState.STOPPED
    if printable in FAILED_STATUSES:
        return PowerState.FAILED
    return None


class ClusterWatch:
    """One cluster's VirtualMachines, followed from a list through a watch that resumes at its
    last version (a bookmark keeps it recent) and lists again when the version is too old."""

    def __init__(self, cluster: Cluster, api: client.ApiClient) -> None:
        self.cluster = cluster
        self.custom = client.CustomObjectsApi(api)
        self.version = ""
        self.stopping = threading.Event()
        self.watcher: watch.Watch | None = None
        self.thread: threading.Thread | None = None

    def stop(self, timeout: float = 10) -> None:
        """Ends the watch at its next event or bookmark, and waits for that."""
        self.stopping.set()
        if self.watcher is not None:
            self.watcher.stop()
        if self.thread is not None:
            self.thread.join(timeout)

    def run(self) -> None:
        try:
            self._run()
        finally:
            db.connection.close()  # the thread's own connection

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                if not self.version:
                    self.resync()
                self.follow()
            except client.ApiException as error:
                if error.status == 410:  # the version is older than the cluster keeps
                    self.version = ""
                    continue
                log.warning("watching cluster %s: %s %s", self.cluster, error.status, error.reason)
                self.stopping.wait(RETRY_SECONDS)
            except Exception as error:  # the connection dropped: list again, then watch on
                if self.stopping.is_set():
                    return  # stop() shut the watch's connection itself
                log.warning("watching cluster %s: %s", self.cluster, error)
                self.version = ""
                self.stopping.wait(RETRY_SECONDS)

    def resync(self) -> None:
        """Every VM as it is now: what changed while no watch ran is caught up."""
        listed = self.custom.list_cluster_custom_object(
            *KUBEVIRT, "virtualmachines", label_selector=SELECTOR, _request_timeout=TIMEOUT
        )
        assert isinstance(listed, dict)
        for vm in listed.get("items", []):
            self.observe(vm, confirmed=True)
        self.version = listed["metadata"]["resourceVersion"]

    def follow(self) -> None:
        self.watcher = watch.Watch()
        for event in self.watcher.stream(
            self.custom.list_cluster_custom_object, *KUBEVIRT, "virtualmachines",
            label_selector=SELECTOR, resource_version=self.version,
            allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
        ):  # fmt: skip
            if self.stopping.is_set():
                return
            vm = event["object"]
            self.version = vm["metadata"]["resourceVersion"]
            if event["type"] in ("ADDED", "MODIFIED"):
                self.observe(vm)

    def observe(self, vm: Body, *, confirmed: bool = False) -> None:
        """Bring the VM's instance in line with the VM's status, when it differs."""
        instance = self._instance_of(vm)
        if instance is None or _wanted(instance, vm) is None:
            return
        if not confirmed:  # an event may be older than what a task has settled since
            current = self.custom.get_namespaced_custom_object(
                *KUBEVIRT, vm["metadata"]["namespace"], "virtualmachines",
                vm["metadata"]["name"], _request_timeout=TIMEOUT,
            )  # fmt: skip
            assert isinstance(current, dict)
            vm = current
        if (wanted := _wanted(instance, vm)) is not None:
            self._settle(instance, wanted, vm.get("status", {}).get("printableStatus", ""))

    def _instance_of(self, vm: Body) -> Instance | None:
        pk = vm["metadata"]["name"].removeprefix("i-")
        if not pk.isdecimal():
            return None
        instance = (
            Instance.objects.select_related("project")
            .filter(pk=int(pk), cluster=self.cluster)
            .first()
        )
        if instance is None:
            return None
        if vm["metadata"]["namespace"] != self.cluster.namespace_for(instance.project.slug):
            return None  # another console's machine of that name
        return instance

    def _settle(self, instance: Instance, state: str, printable: str) -> None:
        was = instance.power_state
        extra: dict[str, Any] = {}
        message = ""
        if was == PowerState.STOPPING:
            extra["last_exit"] = LastExit.REQUESTED
        elif state == PowerState.STOPPED:
            extra["last_exit"] = LastExit.GUEST_POWEROFF
            message = "The guest powered itself off."
        elif state == PowerState.FAILED:
            extra["last_exit"] = LastExit.CRASHED
            message = f"KubeVirt reports {printable}."
        elif state == PowerState.RUNNING and was in (PowerState.STOPPED, PowerState.FAILED):
            extra["auto_restarts"] = F("auto_restarts") + 1
            message = f"KubeVirt ran it again (run strategy {instance.run_strategy})."
        if settle(instance.pk, was, state, message, **extra):
            log.info("%s: %s → %s (%s)", instance.machine_id, was, state, printable)


def _wanted(instance: Instance, vm: Body) -> str | None:
    """The state the VM's status moves the instance to; None when it stays as it is."""
    wanted = power_state_of(vm.get("status", {}).get("printableStatus", ""))
    return wanted if wanted is not None and _moves(instance.power_state, wanted) else None


def _moves(current: str, wanted: str) -> bool:
    """A settled state follows the cluster; a claimed one only to where its request leads
    (its task settles it too: the first to write wins, the other finds it done)."""
    if current == wanted:
        return False
    if current not in POWER_TRANSITIONAL:
        return True
    return (current, wanted) in ((PowerState.STARTING, PowerState.RUNNING),
                                 (PowerState.STOPPING, PowerState.STOPPED))  # fmt: skip


def watch_cluster(cluster: Cluster, ca_folder: Path) -> ClusterWatch:
    """A watch of the cluster on a thread of its own, started."""
    watcher = ClusterWatch(cluster, api_client(cluster_access(cluster), ca_folder))
    watcher.thread = threading.Thread(target=watcher.run, name=f"watch-{cluster}", daemon=True)
    watcher.thread.start()
    return watcher
