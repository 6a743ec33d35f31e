"""People in the admin: staff who are not superusers see only the people of their projects,
their own tokens, and never raise anyone's rights, themselves included."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from instances.choices import Role
from instances.models import ApiToken
from instances.services.tokens import api_token_create
from tests.factories import PASSWORD, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
LOGIN_HISTORY = (AccessAttempt, AccessLog, AccessFailureLog)


@pytest.fixture(autouse=True)
def failure_log(settings):
    """axes keeps a log of every failure too when so configured (off by default)."""
    settings.AXES_ENABLE_ACCESS_FAILURE_LOG = True


def staff(username, codenames, project=None, role=None):
    """A staff user holding these model permissions, member of `project` as `role`: its
    browser, which sends the CSRF token with every POST as the admin's forms do."""
    user = UserFactory(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    if project is not None:
        MembershipFactory(project=project, user=user, role=role)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get(reverse("admin:index"))  # sets the CSRF cookie
    return client, user


def post(client, url, data):
    return client.post(url, {**data, "csrfmiddlewaretoken": client.cookies["csrftoken"].value})


def url_of(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def user_form(user, **changes):
    """The admin's change form of `user` as a browser would send it back, with `changes`."""
    form = {
        "username": user.username, "first_name": "", "last_name": "", "email": "",
        "is_active": "on", "is_staff": "on" if user.is_staff else "",
        "date_joined_0": f"{user.date_joined:%Y-%m-%d}", "date_joined_1": "00:00:00",
        "last_login_0": "", "last_login_1": "", "initial-date_joined_0": "",
    }  # fmt: skip
    return {key: value for key, value in {**form, **changes}.items() if value != ""}


def login_history_of(username):
    """A failed and a successful login of that user, as axes records them."""
    Client().post(reverse("login"), {"username": username, "password": "wrong"})
    Client().post(reverse("login"), {"username": username, "password": PASSWORD})
    Client().post(reverse("login"), {"username": username, "password": "wrong-again"})
    assert all(model.objects.filter(username=username).exists() for model in LOGIN_HISTORY)


def test_a_staff_user_of_no_project_neither_lists_expires_nor_deletes_others_tokens(owner):
    token, _ = api_token_create(user=owner, name="ci-deploys")
    codenames = ["view_apitoken", "change_apitoken", "delete_apitoken"]
    client, _ = staff("prober", codenames)

    listed = client.get(url_of(ApiToken, "changelist"))
    assert listed.status_code == 200 and token.prefix not in listed.text
    assert client.get(url_of(ApiToken, "change", token.pk)).status_code == 404
    soon = timezone.now() + timedelta(minutes=1)
    expired = post(client, url_of(ApiToken, "change", token.pk), {
        "name": token.name, "expires_at_0": f"{soon:%Y-%m-%d}", "expires_at_1": f"{soon:%H:%M:%S}",
    })  # fmt: skip
    assert expired.status_code == 404
    deleted = post(client, url_of(ApiToken, "delete", token.pk), {"post": "yes"})
    assert deleted.status_code == 404
    bulk = {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"}
    post(client, url_of(ApiToken, "changelist"), bulk)
    token.refresh_from_db()
    assert token.expires_at is None


def test_a_staff_user_reads_and_revokes_their_own_tokens(owner):
    client, user = staff("keeper", ["view_apitoken", "delete_apitoken"])
    mine, _ = api_token_create(user=user, name="laptop")
    api_token_create(user=owner, name="ci-deploys")
    listed = client.get(url_of(ApiToken, "changelist")).text
    assert "laptop" in listed and "ci-deploys" not in listed
    assert post(client, url_of(ApiToken, "delete", mine.pk), {"post": "yes"}).status_code == 302
    assert not ApiToken.objects.filter(pk=mine.pk).exists()


def test_a_staff_user_with_change_user_cannot_make_himself_superuser(project):
    client, user = staff("climber", ["view_user", "change_user"], project, Role.VIEWER)
    group = Group.objects.create(name="everything")
    group.permissions.set(Permission.objects.all())
    every = list(Permission.objects.values_list("pk", flat=True))
    raised = user_form(
        user, first_name="Climber", is_superuser="on", groups=[group.pk], user_permissions=every
    )
    answer = post(client, url_of(User, "change", user.pk), raised)
    assert answer.status_code == 302  # his own name he may change
    user.refresh_from_db()
    assert user.first_name == "Climber"
    assert not user.is_superuser and not user.groups.exists()
    assert user.user_permissions.count() == 2


def test_a_staff_user_changes_no_one_elses_account_or_password(project, owner):
    codenames = ["view_user", "change_user", "delete_user", "add_user"]
    client, _ = staff("pusher", codenames, project, Role.ADMIN)
    changed = post(client, url_of(User, "change", owner.pk), user_form(owner, is_superuser="on"))
    assert changed.status_code == 403
    password = {"password1": "Another-pass-123", "password2": "Another-pass-123",
                "set_usable_password": "true"}  # fmt: skip
    assert post(client, url_of(User, "password_change", owner.pk), password).status_code == 403
    assert post(client, url_of(User, "delete", owner.pk), {"post": "yes"}).status_code == 403
    owner.refresh_from_db()
    assert not owner.is_superuser and owner.check_password(PASSWORD)
    created = {"username": "sock", "password1": "Sock-pass-12345", "password2": "Sock-pass-12345"}
    assert post(client, url_of(User, "add"), created).status_code == 403
    assert not User.objects.filter(username="sock").exists()


def test_a_staff_user_cannot_grant_a_group_more_permissions(project):
    client, user = staff("grouper", ["view_group", "change_group"], project, Role.ADMIN)
    group = Group.objects.create(name="ops")
    user.groups.add(group)
    every = list(Permission.objects.values_list("pk", flat=True))
    answer = post(client, url_of(Group, "change", group.pk), {"name": "ops", "permissions": every})
    assert answer.status_code == 403
    assert not group.permissions.exists()


def test_a_staff_user_of_no_project_reads_no_users_and_no_login_history(owner, outsider):
    login_history_of("owner")
    codenames = ["view_user", "view_accessattempt", "view_accesslog", "view_accessfailurelog"]
    client, _ = staff("reader", codenames)

    users = client.get(url_of(User, "changelist"))
    assert users.status_code == 200
    assert url_of(User, "change", owner.pk) not in users.text
    assert url_of(User, "change", outsider.pk) not in users.text
    assert client.get(url_of(User, "change", owner.pk)).status_code == 404
    for model in LOGIN_HISTORY:
        page = client.get(url_of(model, "changelist"), {"q": "owner"})
        assert page.status_code == 200
        assert "127.0.0.1" not in page.text
        row = model.objects.filter(username="owner").first()
        assert client.get(url_of(model, "change", row.pk)).status_code == 404


def test_a_project_admin_reads_the_members_login_history_but_lifts_no_lockout(
    project, owner, viewer, outsider
):
    login_history_of("viewer")
    login_history_of("outsider")
    codenames = ["view_user", "view_accessattempt", "delete_accessattempt"]
    client, _ = staff("boss", codenames, project, Role.ADMIN)

    users = client.get(url_of(User, "changelist")).text
    assert url_of(User, "change", viewer.pk) in users
    assert url_of(User, "change", outsider.pk) not in users
    attempts = client.get(url_of(AccessAttempt, "changelist")).text
    mine = AccessAttempt.objects.get(username="viewer")
    theirs = AccessAttempt.objects.get(username="outsider")
    assert url_of(AccessAttempt, "change", mine.pk) in attempts
    assert url_of(AccessAttempt, "change", theirs.pk) not in attempts
    answer = post(client, url_of(AccessAttempt, "delete", mine.pk), {"post": "yes"})
    assert answer.status_code == 403 and AccessAttempt.objects.filter(pk=mine.pk).exists()


def test_a_project_admin_adds_a_member_found_by_their_exact_user_name(project, other_project):
    UserFactory(username="newcomer")
    client, _ = staff("boss", ["view_user"], project, Role.ADMIN)
    url = reverse("admin:autocomplete")
    asked = {"app_label": "instances", "model_name": "membership", "field_name": "user"}
    exact = client.get(url, {**asked, "term": "newcomer"}).json()["results"]
    assert [result["text"] for result in exact] == ["newcomer"]
    assert client.get(url, {**asked, "term": "newcom"}).json()["results"] == []


def test_a_superuser_still_changes_anyones_rights(admin_client, owner):
    answer = admin_client.post(url_of(User, "change", owner.pk), user_form(owner, is_staff="on"))
    assert answer.status_code == 302
    owner.refresh_from_db()
    assert owner.is_staff
