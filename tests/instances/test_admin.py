import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from instances.choices import PowerState
from instances.models import AuditEvent, Disk, Instance, IPLease
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


@pytest.fixture
def instance(project, operator, subnet):
    from instances.services.instances import DiskRequest, instance_create
    from tests.factories import instance_request

    request = instance_request(subnet, disks=[DiskRequest(size_gb=2)])
    return instance_create(project=project, actor=operator, request=request)


def test_instances_are_not_added_in_the_admin(admin_client):
    assert admin_client.get(reverse("admin:instances_instance_add")).status_code == 403


def test_a_running_instance_is_not_deleted_in_the_admin(admin_client, instance):
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    url = reverse("admin:instances_instance_delete", args=[instance.pk])

    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Instance.objects.filter(pk=instance.pk).exists()
    changelist = admin_client.get(reverse("admin:instances_instance_changelist"))
    assert b"delete_selected" not in changelist.content  # no bulk delete past the rule


def test_the_admin_deletes_a_stopped_instance_as_its_delete_button_does(
    admin_client, instance, host_queue_of, django_capture_on_commit_callbacks
):
    url = reverse("admin:instances_instance_delete", args=[instance.pk])
    assert admin_client.get(url).status_code == 200
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_client.post(url, {"post": "yes"}).status_code == 302

    assert not Instance.objects.filter(pk=instance.pk).exists()
    # the machine's files go on its host; the root disk and addresses go; data disks stay
    [sent] = queue.sent()
    assert (sent.task, sent.args[1]) == ("instances.machine_undefine", instance.machine_id)
    assert list(Disk.objects.values_list("name", "instance")) == [("web-1-disk1", None)]
    assert not IPLease.objects.exists()
    assert AuditEvent.objects.filter(action="instance.delete", actor_name="admin").exists()


def test_placement_and_power_state_are_read_only_in_the_admin(admin_client, instance):
    url = reverse("admin:instances_instance_change", args=[instance.pk])
    form = admin_client.get(url).context["adminform"].form
    assert not {"project", "zone", "host", "backend", "power_state", "run_strategy"} & set(
        form.fields
    )


@pytest.mark.parametrize("model", ["disk", "networkinterface", "iplease"])
def test_disks_interfaces_and_leases_are_shown_not_changed_in_the_admin(
    admin_client, instance, model
):
    row = {
        "disk": instance.disks.first(),
        "networkinterface": instance.nics.first(),
        "iplease": IPLease.objects.first(),
    }[model]
    change = reverse(f"admin:instances_{model}_change", args=[row.pk])

    assert admin_client.get(reverse(f"admin:instances_{model}_add")).status_code == 403
    assert admin_client.get(change).status_code == 200
    assert admin_client.post(change, {}).status_code == 403
    delete = reverse(f"admin:instances_{model}_delete", args=[row.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert type(row).objects.filter(pk=row.pk).exists()


def test_the_instance_page_in_the_admin_shows_its_disks_and_nics_read_only(admin_client, instance):
    page = admin_client.get(reverse("admin:instances_instance_change", args=[instance.pk]))
    formsets = {f.formset.prefix: f for f in page.context["inline_admin_formsets"]}
    assert set(formsets) == {"disks", "nics"}
    for formset in formsets.values():
        assert not formset.has_add_permission and not formset.has_change_permission
        assert not formset.has_delete_permission


def test_a_subnets_addresses_are_read_only_once_it_exists(admin_client, subnet):
    page = admin_client.get(reverse("admin:instances_subnet_change", args=[subnet.pk]))
    fields = set(page.context["adminform"].form.fields)
    assert "name" in fields and not {"cidr_v4", "cidr_v6", "gateway", "zone"} & fields
    add = admin_client.get(reverse("admin:instances_subnet_add")).context["adminform"].form
    assert {"cidr_v4", "gateway"} <= set(add.fields)
