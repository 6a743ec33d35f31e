"""Following what KubeVirt does to the console's machines, two watches per cluster.

KubeVirt enforces the run strategies: it reruns a crashed VMI under Always, leaves a guest that
powered itself off stopped under RerunOnFailure. The console learns of it from a watch on the
cluster's VirtualMachines (the ones it labelled) and one on their VMIs (how each run ended), not
by asking after each instance. A change it reads is checked against the VM as it is now (a GET:
watches lag) before the instance's state is written, and the state a power request claimed is
left to its task, except to finish it.
"""

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django import db
from kubernetes import client, watch

from instances.backends.kubevirt.connection import TIMEOUT, api_client
from instances.backends.kubevirt.manifests import MANAGED_BY
from instances.backends.kubevirt.objects import KUBEVIRT
from instances.choices import POWER_TRANSITIONAL, LastExit, PowerState
from instances.models import Cluster, Instance
from instances.services.clusters import cluster_access
from instances.services.machines import settle
from instances.services.vmi_exits import ENDED, vmi_ended

log = logging.getLogger(__name__)
Body = dict[str, Any]
SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
WATCH_SECONDS = 300  # a watch is renewed from its last version this often
RETRY_SECONDS = 5  # after the cluster failed to answer
ENDED_REMEMBERED = 10_000
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


class Follower:
    """One kind of a cluster's labelled objects, followed from a list through a watch that
    resumes at its last version (a bookmark keeps it recent) and lists again when the version
    is too old."""

    def __init__(self, owner: "ClusterWatch", plural: str, seen: Callable[[Body, bool], None]):
        self.owner, self.plural, self.seen = owner, plural, seen
        self.version = ""
        self.watcher: watch.Watch | None = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            db.connection.close()  # the thread's own connection

    def _run(self) -> None:
        cluster, stopping = self.owner.cluster, self.owner.stopping
        while not stopping.is_set():
            try:
                if not self.version:
                    self.resync()
                self.follow()
            except client.ApiException as error:
                if error.status == 410:  # the version is older than the cluster keeps
                    self.version = ""
                    continue
                log.warning("watching %s of %s: %s %s", self.plural, cluster, error.status,
                            error.reason)  # fmt: skip
                stopping.wait(RETRY_SECONDS)
            except Exception as error:  # the connection dropped: list again, then watch on
                if stopping.is_set():
                    return  # stop() shut the watch's connection itself
                log.warning("watching %s of %s: %s", self.plural, cluster, error)
                self.version = ""
                stopping.wait(RETRY_SECONDS)

    def resync(self) -> None:
        """Every object as it is now: what changed while no watch ran is caught up."""
        listed = self.owner.custom.list_cluster_custom_object(
            *KUBEVIRT, self.plural, label_selector=SELECTOR, _request_timeout=TIMEOUT
        )
        assert isinstance(listed, dict)
        for body in listed.get("items", []):
            self.seen(body, True)
        self.version = listed["metadata"]["resourceVersion"]

    def follow(self) -> None:
        self.watcher = watch.Watch()
        for event in self.watcher.stream(
            self.owner.custom.list_cluster_custom_object, *KUBEVIRT, self.plural,
            label_selector=SELECTOR, resource_version=self.version,
            allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
        ):  # fmt: skip
            if self.owner.stopping.is_set():
                return
            body = event["object"]
            self.version = body["metadata"]["resourceVersion"]
            if event["type"] in ("ADDED", "MODIFIED"):
                self.seen(body, False)
            elif event["type"] == "DELETED":
                self.owner.gone(self.plural, body)


class ClusterWatch:
    """A cluster's VirtualMachines (the instances' states) and their VMIs (how each run ended),
    each followed by a watch on a thread of its own."""

    def __init__(self, cluster: Cluster, api: client.ApiClient) -> None:
        self.cluster = cluster
        self.custom = client.CustomObjectsApi(api)
        self.stopping = threading.Event()
        self.followers = [
            Follower(self, "virtualmachines", self.observe),
            Follower(self, "virtualmachineinstances", self.observe_vmi),
        ]
        self.threads: list[threading.Thread] = []
        self.ended: dict[str, None] = {}  # the uids of ended VMIs already recorded, oldest first
        self.ended_lock = threading.Lock()

    def start(self) -> None:
        for follower in self.followers:
            thread = threading.Thread(
                target=follower.run, name=f"watch-{self.cluster}-{follower.plural}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def stop(self, timeout: float = 10) -> None:
        """Ends the watches at their next event or bookmark, and waits for that."""
        self.stopping.set()
        for follower in self.followers:
            if follower.watcher is not None:
                follower.watcher.stop()
        for thread in self.threads:
            thread.join(timeout)

    def observe(self, vm: Body, confirmed: bool = False) -> None:
        """Bring the VM's instance in line with the VM's status, when it differs."""
        instance = self._instance_of(vm)
        if instance is None or _wanted(instance, vm) is None:
            return
        if not confirmed:  # an event may be older than what a task has settled since
            current = self._get("virtualmachines", vm)
            if current is None:
                return
            vm = current
        wanted = _wanted(instance, vm)
        if wanted is None:
            return
        if instance.power_state == PowerState.RUNNING and wanted != PowerState.RUNNING:
            vmi = self._get("virtualmachineinstances", vm)  # how the run ended, if it still shows
            if vmi is not None and self._ended(instance, vmi):
                return
        self._settle(instance, wanted, vm.get("status", {}).get("printableStatus", ""))

    def observe_vmi(self, vmi: Body, confirmed: bool = False) -> None:
        """The node a VMI runs on, for its instance's page; a VMI that ended by itself: record
        how on its instance."""
        status = vmi.get("status", {})
        ended = status.get("phase") in ENDED
        node = "" if ended else status.get("nodeName", "")
        instance = self._instance_of(vmi)
        if instance is None:
            return
        if instance.node != node:
            Instance.objects.filter(pk=instance.pk).update(node=node)
        if ended:
            self._ended(instance, vmi)

    def gone(self, plural: str, body: Body) -> None:
        """A VMI deleted: its instance runs on no node now."""
        if plural == "virtualmachineinstances" and (instance := self._instance_of(body)):
            Instance.objects.filter(pk=instance.pk).exclude(node="").update(node="")

    def _ended(self, instance: Instance, vmi: Body) -> bool:
        """Record an ended VMI once (both watches may see it); False when it has not ended."""
        phase = vmi.get("status", {}).get("phase", "")
        if phase not in ENDED:
            return False
        with self.ended_lock:
            if vmi["metadata"]["uid"] in self.ended:
                return True
            self.ended[vmi["metadata"]["uid"]] = None
            while len(self.ended) > ENDED_REMEMBERED:
                del self.ended[next(iter(self.ended))]
            if vmi_ended(instance.pk, phase):
                log.info("%s: its VMI %s (%s)", instance.machine_id, phase, instance.run_strategy)
        return True

    def _get(self, plural: str, body: Body) -> Body | None:
        try:
            current = self.custom.get_namespaced_custom_object(
                *KUBEVIRT, body["metadata"]["namespace"], plural, body["metadata"]["name"],
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        assert isinstance(current, dict)
        return current

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
            message = "It was stopped outside the console."
        elif state == PowerState.FAILED:
            extra["last_exit"] = LastExit.CRASHED
            message = f"KubeVirt reports {printable}."
        elif state == PowerState.RUNNING and was in (PowerState.STOPPED, PowerState.FAILED):
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
    watcher.start()
    return watcher
