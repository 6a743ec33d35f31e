"""A watch on the fake whose resourceVersion is too old is told so as the API server tells it:
a 410 Status before the stream starts, an ERROR event carrying the 410 once it runs."""

import json
import threading
import urllib.error
import urllib.request

import pytest
from kubernetes import client, watch

from tests.fakes.kubevirt.server import FakeApiServer
from tests.fakes.kubevirt.store import BY_KIND
from tests.instances.backends.kubevirt.test_fake_api import VMS, vm


def test_a_watch_from_a_version_no_longer_kept_is_a_410_status_before_it_starts(
    kube_api: FakeApiServer, custom
):
    since = custom.create_namespaced_custom_object(*VMS, vm())["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(*VMS, "i-1", {"spec": {"runStrategy": "Always"}})
    kube_api.store.compact()
    request = urllib.request.Request(
        f"{kube_api.url}/apis/kubevirt.io/v1/namespaces/zop-p1/virtualmachines"
        f"?watch=true&resourceVersion={since}",
        headers={"Authorization": "Bearer console-token"},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=5)
    status = json.loads(raised.value.read())
    assert raised.value.code == 410
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Expired", 410)


def test_a_watch_whose_version_is_forgotten_while_it_waits_ends_with_an_error_event(
    kube_api: FakeApiServer, custom
):
    since = custom.create_namespaced_custom_object(*VMS, vm())["metadata"]["resourceVersion"]
    store = kube_api.store
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object, *VMS, resource_version=since,
        allow_watch_bookmarks=True, timeout_seconds=10,
    )  # fmt: skip
    assert next(stream)["type"] == "BOOKMARK"  # the watch runs, waiting for a change

    def forget_then_change() -> None:  # as etcd compacts: the waiting watch's version is gone
        with store.lock:
            store.create(BY_KIND["VirtualMachine"], "zop-p1", vm("i-2"))
            store.compact()
            store.create(BY_KIND["VirtualMachine"], "zop-p1", vm("i-3"))

    threading.Timer(0.05, forget_then_change).start()
    with pytest.raises(client.ApiException) as raised:
        for event in stream:
            assert event["type"] == "BOOKMARK"
    assert raised.value.status == 410
    assert "too old resource version" in str(raised.value.reason)
