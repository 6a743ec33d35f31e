"""The admin follows project roles: a staff user sees and changes only what their role in the
object's project allows, with user data redacted as on the pages."""

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from instances.choices import Role, UserDataMode
from instances.models import GitSource, Image, Instance, SSHKey
from instances.services.instances import instance_create
from instances.services.keys import ssh_key_add
from provisioning.models import CloudAccount
from provisioning.services.accounts import account_create
from tests.factories import MembershipFactory, ProjectFactory, UserFactory, instance_request
from tests.instances.api.helpers import public_key

pytestmark = pytest.mark.django_db
SECRET = "Hunter2-db-password"
USER_DATA = f"#cloud-config\nchpasswd:\n  list: |\n    root:{SECRET}\nruncmd:\n  - echo hello\n"
PERMISSIONS = [
    "view_instance", "change_instance", "view_sshkey", "change_sshkey",
    "view_cloudaccount", "change_cloudaccount", "view_project",
]  # fmt: skip


def staff(username, project=None, role=None):
    """A staff user with the model permissions the probe gave, member of `project` as `role`."""
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=PERMISSIONS))
    if project is not None:
        MembershipFactory(project=project, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def instance(project, owner, subnet):
    request = instance_request(
        subnet, user_data_mode=UserDataMode.CUSTOM, custom_user_data=USER_DATA
    )
    return instance_create(project=project, actor=owner, request=request)


@pytest.fixture
def key(project, owner):
    return ssh_key_add(project=project, actor=owner, name="laptop", public_key=public_key())


@pytest.fixture
def cloud_account(project):
    return account_create(
        project=project, actor=None, name="Prod", access_key_id="AKIAEXAMPLE",
        secret_access_key="s3cr3t",
    )  # fmt: skip


def change_url(obj):
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


def list_url(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def test_a_staff_outsider_neither_sees_nor_changes_another_projects_rows(
    other_project, instance, key, cloud_account
):
    client = staff("prober", other_project, Role.ADMIN)
    for obj in (instance, key, cloud_account):
        assert client.get(change_url(obj)).status_code == 404
        page = client.get(list_url(type(obj))).text
        assert change_url(obj) not in page
    assert SECRET not in client.get(list_url(Instance)).text
    posted = client.post(change_url(key), {"name": "owned", "project": other_project.pk,
                                          "public_key": key.public_key})  # fmt: skip
    assert posted.status_code == 404
    assert SSHKey.objects.get(pk=key.pk).name == "laptop"
    posted = client.post(change_url(cloud_account), {"name": "owned"})
    assert posted.status_code == 404
    assert CloudAccount.objects.get(pk=cloud_account.pk).name == "Prod"


def test_a_staff_user_of_no_project_sees_no_rows(instance, key):
    client = staff("stranger")
    assert client.get(change_url(instance)).status_code == 404
    assert "web-1" not in client.get(list_url(Instance)).text


def test_a_viewer_member_reads_user_data_redacted_and_changes_nothing(project, instance, key):
    client = staff("watcher", project, Role.VIEWER)
    page = client.get(change_url(instance))
    assert page.status_code == 200
    assert SECRET not in page.text
    assert "echo hello" in page.text  # the rest is shown
    assert 'name="custom_user_data"' not in page.text
    assert 'name="name"' not in page.text  # read-only for a viewer
    posted = client.post(change_url(key), {"name": "renamed", "project": project.pk,
                                          "public_key": key.public_key})  # fmt: skip
    assert posted.status_code == 403
    assert SSHKey.objects.get(pk=key.pk).name == "laptop"


def test_an_operator_member_changes_keys_but_not_the_projects_cloud_accounts(
    project, key, cloud_account
):
    client = staff("hands", project, Role.OPERATOR)
    posted = client.post(change_url(key), {"name": "renamed", "project": project.pk,
                                          "public_key": key.public_key})  # fmt: skip
    assert posted.status_code == 302
    assert SSHKey.objects.get(pk=key.pk).name == "renamed"
    assert client.post(change_url(cloud_account), {"name": "owned"}).status_code == 403


def test_an_admin_member_edits_and_reads_user_data_as_written(
    project, other_project, instance, key, cloud_account
):
    client = staff("boss", project, Role.ADMIN)
    page = client.get(change_url(instance)).text
    assert SECRET in page and 'name="custom_user_data"' in page
    form = client.get(change_url(key)).text
    assert f'<option value="{project.pk}" selected>' in form
    assert f'<option value="{other_project.pk}"' not in form  # only their projects to choose
    posted = client.post(change_url(key), {"name": "renamed", "project": project.pk,
                                          "public_key": key.public_key})  # fmt: skip
    assert posted.status_code == 302 and SSHKey.objects.get(pk=key.pk).name == "renamed"
    moved = client.post(change_url(key), {"name": "renamed", "project": other_project.pk,
                                         "public_key": key.public_key})  # fmt: skip
    assert moved.status_code == 200 and SSHKey.objects.get(pk=key.pk).project == project


def test_a_project_admin_may_not_set_an_accounts_endpoint_in_the_admin(project, cloud_account):
    client = staff("boss", project, Role.ADMIN)
    page = client.get(change_url(cloud_account)).text
    assert 'name="endpoint_url"' not in page and 'name="name"' in page


def image_staff(username, project):
    """A staff operator of `project` allowed to view and change images."""
    user = UserFactory(username=username, is_staff=True)
    codenames = ["view_image", "change_image"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    MembershipFactory(project=project, user=user, role=Role.OPERATOR)
    client = Client()
    client.force_login(user)
    return client, user


def test_a_staff_operator_cannot_point_an_image_at_a_host_file_or_share_it(project):
    image = Image.objects.create(project=project, name="mine", kind="qcow2", path="uploads/a.qcow2")
    client, _ = image_staff("imager", project)
    form = {"project": "", "name": "mine", "kind": "qcow2", "os_type": "linux",
            "path": "/etc/shadow", "reference": "", "min_disk_gb": 1, "description": ""}  # fmt: skip
    answer = client.post(change_url(image), form)
    assert answer.status_code == 200 and "This field is required" in answer.text
    answer = client.post(change_url(image), {**form, "project": project.pk})
    assert answer.status_code == 302
    image.refresh_from_db()
    assert image.path == "uploads/a.qcow2" and image.project == project


def test_an_image_path_is_inside_the_images_folder():
    for path in ("/etc/shadow", "../other/x.qcow2", "uploads/../../x"):
        with pytest.raises(ValidationError) as refused:
            Image(name="x", kind="qcow2", path=path).clean()
        assert "inside the images folder" in str(refused.value)
    Image(name="x", kind="qcow2", path="uploads/x.qcow2").clean()


def test_the_project_filter_lists_only_the_users_projects(project, other_project):
    third = ProjectFactory(slug="hidden-corp", name="Hidden Corp")
    for owner in (project, other_project, third):
        Image.objects.create(project=owner, name="img", kind="qcow2", path="uploads/a.qcow2")
    client, user = image_staff("filterer", project)
    MembershipFactory(project=other_project, user=user, role=Role.VIEWER)
    page = client.get(list_url(Image)).text
    assert f"project__id__exact={project.pk}" in page
    assert f"project__id__exact={other_project.pk}" in page
    assert "Hidden Corp" not in page and f"project__id__exact={third.pk}" not in page


def test_a_project_admin_cannot_lend_a_git_source_another_users_rights(project, owner, admin_user):
    source = GitSource.objects.create(
        project=project, url="https://git.example.com/r.git", branch="main", auth="none",
        actor=admin_user,
    )  # fmt: skip
    user = UserFactory(username="gitboss", is_staff=True)
    codenames = ["view_gitsource", "change_gitsource"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    MembershipFactory(project=project, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    assert 'name="actor"' not in client.get(change_url(source)).text
    form = {"project": project.pk, "url": source.url, "branch": "dev", "path": "",
            "auth": "none", "actor": admin_user.pk, "new_credential": "",
            "syncs-TOTAL_FORMS": 0, "syncs-INITIAL_FORMS": 0}  # fmt: skip
    answer = client.post(change_url(source), form)
    assert answer.status_code == 302, answer.text[:2000]
    source.refresh_from_db()
    assert (source.branch, source.actor) == ("dev", user)  # syncs act as who saved it
