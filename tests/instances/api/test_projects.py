"""Projects and images as the API shows them."""

import pytest

from tests.factories import ImageFactory, MembershipFactory

pytestmark = pytest.mark.django_db


def test_a_member_lists_their_projects_with_their_role(api_for, viewer, other_project):
    MembershipFactory(project=other_project, user=viewer, role="admin")
    assert api_for("viewer").get("/projects").json() == [
        {"slug": "alpha", "name": "Alpha", "description": "", "role": "viewer"},
        {"slug": "beta", "name": "Beta", "description": "", "role": "admin"},
    ]


def test_an_outsider_does_not_see_the_project(api_for, project, outsider):
    api = api_for("outsider")
    assert [p["slug"] for p in api.get("/projects").json()] == ["beta"]
    response = api.get("/projects/alpha")
    assert response.status_code == 404
    assert response.json() == {"detail": "No such project.", "errors": {}}


def test_a_superuser_is_admin_of_every_project(project, other_project, django_user_model):
    from django.test import Client

    from instances.services.tokens import api_token_create
    from tests.instances.api.helpers import Api

    root = django_user_model.objects.create_superuser("root", password="x")
    _, plaintext = api_token_create(user=root, name="t")
    projects = Api(Client(), {"Authorization": f"Bearer {plaintext}"}).get("/projects").json()
    assert {(p["slug"], p["role"]) for p in projects} == {("alpha", "admin"), ("beta", "admin")}


def test_images_are_the_shared_ones_and_the_projects_own(api_for, viewer, project, other_project):
    ImageFactory(name="debian")
    ImageFactory(name="alpha-custom", project=project)
    ImageFactory(name="beta-secret", project=other_project)
    images = api_for("viewer").get("/projects/alpha/images").json()
    assert [(i["name"], i["shared"]) for i in images] == [("alpha-custom", False), ("debian", True)]
