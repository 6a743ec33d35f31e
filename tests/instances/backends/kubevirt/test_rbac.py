"""deploy/kubevirt/rbac.yaml gives the console no Secret across the cluster: a ClusterRole bound
in each project namespace the console made (as KubeVirt's user guide narrows a ClusterRole to
one namespace with a RoleBinding), and an admission policy keeping that binding there."""

import pytest
from kubernetes import client

from instances.backends.kubevirt.manifests import (
    CONSOLE_ACCOUNT,
    MANAGED_BY,
    SECRETS_ROLE,
    Placement,
)
from instances.backends.kubevirt.objects import NamespaceObjects
from tests.fakes.kubevirt.fixtures import api_client
from tests.fakes.kubevirt.store import BY_KIND
from tests.instances.backends.kubevirt.test_connection import ship, shipped_documents
from tests.instances.backends.kubevirt.test_manifests import SHAPES, image_url

CONSOLE_USER = f"system:serviceaccount:{CONSOLE_ACCOUNT['namespace']}:{CONSOLE_ACCOUNT['name']}"


def of_kind(kind: str) -> list[dict]:
    return [doc for doc in shipped_documents() if doc["kind"] == kind]


def cluster_role(name: str) -> dict:
    return next(doc for doc in of_kind("ClusterRole") if doc["metadata"]["name"] == name)


def test_no_role_bound_across_the_cluster_reaches_a_secret():
    bound = [binding["roleRef"]["name"] for binding in of_kind("ClusterRoleBinding")]
    assert bound and SECRETS_ROLE not in bound
    for rule in (rule for name in bound for rule in cluster_role(name)["rules"]):
        assert "*" not in rule["resources"] and "*" not in rule["verbs"]
        if {"", "*"} & set(rule["apiGroups"]):
            assert "secrets" not in rule["resources"]
        if {"bind", "escalate", "impersonate"} & set(rule["verbs"]):
            assert rule["resourceNames"] == [SECRETS_ROLE]
            assert set(rule["verbs"]) == {"bind"}


def test_the_secrets_role_writes_secrets_and_nothing_else():
    [rule] = cluster_role(SECRETS_ROLE)["rules"]
    assert (rule["apiGroups"], rule["resources"]) == ([""], ["secrets"])
    assert set(rule["verbs"]) == {"create", "update"}  # no get, list, watch or delete


def test_the_console_may_bind_it_only_to_itself_in_a_namespace_it_made():
    [account] = of_kind("ServiceAccount")
    assert (account["metadata"]["namespace"], account["metadata"]["name"]) == (
        CONSOLE_ACCOUNT["namespace"], CONSOLE_ACCOUNT["name"],
    )  # fmt: skip
    [policy] = of_kind("ValidatingAdmissionPolicy")
    [binding] = of_kind("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["rolebindings"]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{CONSOLE_USER}'"
    namespace_check, binding_check = (check["expression"] for check in spec["validations"])
    [(label, value)] = MANAGED_BY.items()
    assert f"namespaceObject.metadata.labels['{label}'] == '{value}'" in namespace_check
    assert f"object.roleRef.name == '{SECRETS_ROLE}'" in binding_check
    assert f"object.subjects[0].name == '{CONSOLE_ACCOUNT['name']}'" in binding_check


def test_the_shipped_account_writes_seeds_in_its_project_namespace_and_nowhere_else(kube_api):
    ship(kube_api, "shipped")
    objects = NamespaceObjects(api_client(kube_api, "shipped"), "zop-web")
    objects.define(
        SHAPES["uefi secure boot, vtpm, subnets"], Placement("zop-web", "Halted"), image_url
    )

    everything = client.CoreV1Api(api_client(kube_api))
    assert everything.read_namespaced_secret("i-8-cloudinit", "zop-web").type == "Opaque"
    [made] = kube_api.store.list(BY_KIND["RoleBinding"], "zop-web", lambda _: True)[0]
    assert made["subjects"] == [CONSOLE_ACCOUNT] and made["roleRef"]["name"] == SECRETS_ROLE

    everything.create_namespace({"metadata": {"name": "kube-system"}})
    shipped = client.CoreV1Api(api_client(kube_api, "shipped"))
    decoy = {"metadata": {"name": "decoy"}, "stringData": {"k": "v"}}
    for call in (
        lambda: shipped.create_namespaced_secret("kube-system", decoy),
        lambda: shipped.list_secret_for_all_namespaces(),
        lambda: shipped.list_namespaced_secret("zop-web"),
        lambda: shipped.read_namespaced_secret("i-8-cloudinit", "zop-web"),
        lambda: shipped.delete_namespaced_secret("i-8-cloudinit", "zop-web"),
    ):
        with pytest.raises(client.ApiException) as refused:
            call()
        assert refused.value.status == 403
