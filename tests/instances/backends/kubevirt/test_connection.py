"""Checking a cluster against the fake API server: the zones come from its nodes, and each way
signing in can fail is a message saying what to fix."""

import socket
from pathlib import Path

import pytest
import yaml

from instances.backends.kubevirt.connection import ClusterAccess, api_client
from instances.models import Cluster
from instances.services.clusters import cluster_check
from tests.fakes.kubevirt.server import Subject

pytestmark = pytest.mark.django_db

RBAC = "deploy/kubevirt/rbac.yaml"
ROOT = Path(__file__).resolve().parents[4]


def shipped_documents() -> list[dict]:
    return list(yaml.safe_load_all((ROOT / RBAC).read_text()))


def rules_of(role: dict) -> list[tuple[set[str], str, set[str]]]:
    return [
        (set(rule["verbs"]), group, set(rule["resources"]))
        for rule in role["rules"]
        for group in rule["apiGroups"]
    ]


def shipped_role() -> Subject:
    """The console's service account as deploy/kubevirt/rbac.yaml makes it cluster-wide."""
    documents = shipped_documents()
    bound = next(doc for doc in documents if doc["kind"] == "ClusterRoleBinding")["roleRef"]
    role = next(
        doc for doc in documents if doc["kind"] == "ClusterRole"
        and doc["metadata"]["name"] == bound["name"]
    )  # fmt: skip
    return Subject("system:serviceaccount:zopday:zopday-console", rules=rules_of(role))


def ship(kube_api, token: str) -> None:
    """The fake's `token` signs in as the shipped account; the ClusterRoles rbac.yaml binds
    in no namespace are known for the RoleBindings the console makes."""
    kube_api.add_token(token, shipped_role())
    for doc in shipped_documents():
        if doc["kind"] == "ClusterRole":
            kube_api.cluster_roles[doc["metadata"]["name"]] = rules_of(doc)


def cluster_at(url: str, token: str) -> Cluster:
    cluster = Cluster(name="lab", api_url=url)
    cluster.token = token
    cluster.save()
    return cluster


def test_the_shipped_role_reads_the_zones_of_the_nodes(kube_api):
    ship(kube_api, "shipped")
    cluster = cluster_at(kube_api.url, "shipped")
    assert cluster_check(cluster) == ""
    cluster.refresh_from_db()
    assert (cluster.zones, cluster.last_error) == (["zone-a", "zone-b"], "")
    assert cluster.checked_at is not None


def test_a_cluster_that_does_not_answer_says_so():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    cluster = cluster_at(f"http://127.0.0.1:{port}", "anything")
    problem = cluster_check(cluster)
    assert problem.startswith(
        f"The cluster's API server at http://127.0.0.1:{port} does not answer"
    )
    cluster.refresh_from_db()
    assert cluster.last_error == problem and cluster.zones == []


def test_an_expired_token_asks_for_a_new_one(kube_api):
    kube_api.add_token("old", Subject("old", expires=0))
    problem = cluster_check(cluster_at(kube_api.url, "old"))
    assert "refused the console's token (expired or revoked)" in problem


def test_a_missing_rbac_rule_is_named(kube_api):
    kube_api.add_token("partial", Subject("partial", rules=[({"list"}, "", {"nodes"})]))
    problem = cluster_check(cluster_at(kube_api.url, "partial"))
    assert problem == (
        "The console's service account lacks an RBAC rule: virtualmachines.kubevirt.io is "
        'forbidden: User "partial" cannot list resource "virtualmachines" in API group '
        f'"kubevirt.io". Apply {RBAC} to the cluster, or add that rule to its role.'
    )


def test_the_ca_certificate_is_given_to_the_client_as_a_file(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    api = api_client(ClusterAccess("https://k8s.example.test:6443", "t", pem), tmp_path)
    assert Path(api.configuration.ssl_ca_cert).read_text() == pem


def test_the_admin_checks_a_cluster_and_shows_its_zones(admin_client, kube_api):
    cluster = cluster_at(kube_api.url, "console-token")
    page = admin_client.post(
        "/admin/instances/cluster/",
        {"action": "check_connection", "_selected_action": [cluster.pk]},
        follow=True,
    )
    assert "Lab answers; zones: zone-a, zone-b." in page.content.decode()
