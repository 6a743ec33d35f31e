"""The cluster watch on the KubeVirt fake: it follows the VirtualMachines and their VMIs through
two watches and, told to stop, ends them without calling the connection it closed itself a failure."""

import logging
import time

import pytest

from instances.models import Cluster
from instances.services.cluster_watch import watch_cluster
from tests.fakes.kubevirt.fixtures import KERNEL_IMAGE

pytestmark = pytest.mark.django_db(transaction=True)


def test_stopping_the_watch_ends_it_quietly(kube_api, tmp_path, caplog):
    cluster = Cluster(name="lab", api_url=kube_api.url, kernel_image=KERNEL_IMAGE)
    cluster.token = "console-token"
    cluster.save()
    kube_api.bookmark_seconds = 60  # no bookmark comes to end the watch's read for it
    watcher = watch_cluster(cluster, tmp_path)
    deadline = time.monotonic() + 10
    while not (kube_api.requests["watch virtualmachines"]
               and kube_api.requests["watch virtualmachineinstances"]):  # fmt: skip
        assert time.monotonic() < deadline, "the watch never opened"
        time.sleep(0.02)
    time.sleep(0.2)  # the watch now waits in its read for the next event
    with caplog.at_level(logging.INFO, logger="instances.services.cluster_watch"):
        watcher.stop()
    assert len(watcher.threads) == 2 and not any(t.is_alive() for t in watcher.threads)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
