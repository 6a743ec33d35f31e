import pytest
from django.urls import reverse

from instances.services import audit_record
from tests.factories import PASSWORD, MembershipFactory

pytestmark = pytest.mark.django_db


def test_the_login_page_logs_a_member_into_their_project(client, viewer, project):
    assert "Log in to ZopDay" in client.get(reverse("login")).text
    response = client.post(
        reverse("login"), {"username": "viewer", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("project-overview", args=[project.slug])
    assert "Alpha" in response.text


def test_a_wrong_password_is_refused_with_a_message(client, viewer):
    response = client.post(reverse("login"), {"username": "viewer", "password": "nope"})
    assert response.status_code == 200
    assert "enter a correct username and password" in response.text


def test_home_lists_the_projects_of_a_member_of_several(client_for, owner, other_project):
    MembershipFactory(project=other_project, user=owner)
    response = client_for("owner").get(reverse("home"))
    assert response.status_code == 200
    assert "Alpha" in response.text and "Beta" in response.text


def test_home_explains_what_to_do_without_any_project(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("lonely", password="x"))
    assert "not a member of any project" in client.get(reverse("home")).text


def test_the_switcher_lists_only_the_users_projects(client_for, viewer, other_project):
    text = client_for("viewer").get(reverse("project-overview", args=["alpha"])).text
    assert 'href="/projects/alpha/"' in text
    assert 'href="/projects/beta/"' not in text


def test_the_overview_shows_members_and_recent_events(client_for, owner, viewer, project):
    audit_record(actor=owner, action="project.rename", project=project, target=project)
    text = client_for("viewer").get(reverse("project-overview", args=[project.slug])).text
    assert "<td>owner</td><td>Admin</td>" in text and "<td>viewer</td><td>Viewer</td>" in text
    assert "project.rename" in text


def test_events_are_paginated_newest_first(client_for, owner, project):
    for n in range(55):
        audit_record(actor=owner, action=f"test.event{n:02d}", project=project)
    first = client_for("owner").get(reverse("project-events", args=[project.slug])).text
    assert "test.event54" in first and "test.event00" not in first
    second = client_for("owner").get(reverse("project-events", args=[project.slug]) + "?page=2")
    assert "test.event00" in second.text


def test_logout_is_post_only(client_for, viewer):
    client = client_for("viewer")
    assert client.get(reverse("logout")).status_code == 405
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("project-overview", args=["alpha"])).status_code == 302


def test_csrf_is_enforced_on_login(viewer):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("login"), {"username": "viewer", "password": PASSWORD})
    assert response.status_code == 403


def test_a_refused_page_says_why(client_for, viewer, project):
    response = client_for("viewer").get(reverse("instance-new", args=[project.slug]))
    assert response.status_code == 403
    assert f"This needs the operator role in {project.name}." in response.text
    assert "<h1>Not allowed</h1>" in response.text


def test_pages_send_the_csrf_token_to_htmx(client_for, viewer):
    text = client_for("viewer").get(reverse("project-overview", args=["alpha"])).text
    assert 'hx-headers=\'{"X-CSRFToken": "' in text
    assert "vendor/htmx/htmx.min.js" in text
