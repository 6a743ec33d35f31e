"""Every page so far, against every role: members see their project, outsiders get 404."""

import pytest
from django.urls import reverse

from instances.access import object_for_user, project_for_user, require_role
from instances.choices import Role
from instances.models import Membership

pytestmark = pytest.mark.django_db

PROJECT_PAGES = ["project-overview", "project-events"]
EXPECTED = {"owner": 200, "operator": 200, "viewer": 200, "outsider": 404}


@pytest.mark.parametrize("page", PROJECT_PAGES)
@pytest.mark.parametrize("role", EXPECTED)
def test_project_pages_answer_each_role(client_for, project, page, role):
    response = client_for(role).get(reverse(page, args=[project.slug]))
    assert response.status_code == EXPECTED[role]


@pytest.mark.parametrize("page", PROJECT_PAGES)
def test_anonymous_visitors_are_sent_to_the_login_page(client, project, page):
    response = client.get(reverse(page, args=[project.slug]))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_an_unknown_project_is_a_404_like_a_foreign_one(client_for, owner):
    assert client_for("owner").get(reverse("project-overview", args=["nope"])).status_code == 404


def test_a_superuser_is_admin_of_every_project(project, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="x")
    assert project_for_user(root, project.slug, Role.ADMIN) == (project, Role.ADMIN)


def test_a_too_low_role_is_refused_with_the_role_it_needs(project, viewer):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied, match="needs the operator role in Alpha"):
        require_role(viewer, project, Role.OPERATOR)


def test_an_outsider_cannot_see_objects_of_another_project(project, viewer, outsider):
    from django.http import Http404

    membership = Membership.objects.get(user=viewer)  # an object of project alpha
    with pytest.raises(Http404):
        object_for_user(Membership.objects, outsider, pk=membership.pk)


def test_object_access_follows_the_object_project(project, operator, viewer):
    from django.core.exceptions import PermissionDenied

    membership = Membership.objects.get(user=viewer)
    assert object_for_user(Membership.objects, operator, Role.OPERATOR, pk=membership.pk) == (
        membership,
        Role.OPERATOR,
    )
    with pytest.raises(PermissionDenied):
        object_for_user(Membership.objects, viewer, Role.OPERATOR, pk=membership.pk)


def test_inactive_members_have_no_role(project, viewer):
    viewer.is_active = False
    viewer.save()
    from django.http import Http404

    with pytest.raises(Http404):
        project_for_user(viewer, project.slug)


def test_a_user_object_reads_its_role_once_and_a_role_change_is_read_afresh(
    project, viewer, owner, django_assert_num_queries
):
    from instances.access import project_role
    from instances.services import membership_set

    with django_assert_num_queries(1):
        assert project_role(viewer, project) is Role.VIEWER
        assert project_role(viewer, project) is Role.VIEWER  # the page's check, then its service
    membership_set(project=project, user=viewer, role=Role.OPERATOR, actor=owner)
    assert project_role(viewer, project) is Role.OPERATOR


def test_each_request_reads_the_role_afresh(client, project, viewer):
    """A request's user is its own object: a role taken away is gone on the next request."""
    client.force_login(viewer)
    page = reverse("project-overview", args=[project.slug])
    assert client.get(page).status_code == 200
    Membership.objects.filter(user=viewer).delete()
    assert client.get(page).status_code == 404
