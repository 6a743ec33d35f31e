import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from instances.services import audit_record

pytestmark = pytest.mark.django_db

PRODUCT_MODELS = [
    model
    for app in ("instances", "provisioning")
    for model in apps.get_app_config(app).get_models()
]


@pytest.mark.parametrize("model", PRODUCT_MODELS, ids=lambda m: m.__name__)
def test_the_admin_lists_every_model(admin_client, model, project, owner):
    audit_record(actor=owner, action="a.b", project=project, target=project)
    assert admin.site.is_registered(model)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    assert admin_client.get(url).status_code == 200
    assert admin_client.get(url, {"q": "alpha"}).status_code == 200


def test_the_audit_trail_cannot_be_edited_in_the_admin(admin_client):
    assert admin_client.get(reverse("admin:instances_auditevent_add")).status_code == 403


def test_members_without_staff_rights_do_not_reach_the_admin(client_for, owner):
    response = client_for("owner").get(reverse("admin:index"))
    assert response.status_code == 302 and "/admin/login/" in response.url


@pytest.mark.parametrize("model", ["provisioningjob", "jobinstance"])
def test_jobs_and_their_instance_links_are_not_added_in_the_admin(admin_client, model):
    assert admin_client.get(reverse(f"admin:provisioning_{model}_add")).status_code == 403
