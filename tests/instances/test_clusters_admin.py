"""A superuser adds a Kubernetes cluster in the admin; its token is encrypted at rest, never
shown, and no other staff user sees the clusters at all."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from instances.models import Cluster
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ADD = "/admin/instances/cluster/add/"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.zopday-console-token"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"


def test_a_cluster_is_added_with_its_token_encrypted_and_never_shown(admin_client):
    data = {"name": "lab", "api_url": "https://k8s.example.test:6443", "ca_certificate": CA,
            "namespace_prefix": "zop-", "kernel_image": ""}  # fmt: skip
    page = admin_client.post(ADD, data)
    assert "Give the service account token the console signs in with." in page.content.decode()
    page = admin_client.post(ADD, {**data, "ca_certificate": "not a pem", "new_token": TOKEN})
    assert "Paste the CA certificate in PEM" in page.content.decode()
    assert not Cluster.objects.exists()
    assert admin_client.post(ADD, {**data, "new_token": TOKEN}).status_code == 302
    cluster = Cluster.objects.get(name="lab")
    assert cluster.token == TOKEN and TOKEN not in cluster.token_encrypted
    assert cluster.namespace_for("web") == "zop-web"
    change = admin_client.get(f"/admin/instances/cluster/{cluster.pk}/change/")
    assert TOKEN not in change.content.decode()
    kept = admin_client.post(f"/admin/instances/cluster/{cluster.pk}/change/", data)
    assert kept.status_code == 302
    cluster.refresh_from_db()
    assert cluster.token == TOKEN  # an empty token field keeps the stored one


def test_staff_who_are_not_superusers_neither_see_nor_add_clusters():
    Cluster.objects.create(name="lab", api_url="https://k8s.example.test:6443")
    user = UserFactory(username="staffer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__endswith="_cluster"))
    client = Client()
    client.force_login(user)
    assert client.get("/admin/instances/cluster/").status_code == 403
    assert client.get(ADD).status_code == 403
    assert "cluster" not in client.get("/admin/").content.decode().lower()
