"""A login or a signature inside an import's address is for the fetch only: pages, API answers,
exports and audit labels show the address without it, to viewers and admins alike."""

import pytest
from django.urls import reverse

from instances.choices import ImageKind, ImportStatus
from instances.models import ImageImport
from instances.url_redaction import url_redacted
from tests.factories import ImageFactory

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-Pa55"
URL = (
    f"https://deploy:{SECRET}@images.example.com/noble.qcow2"
    f"?X-Amz-Signature={SECRET}&token={SECRET}&X-Amz-Credential={SECRET}&version=2"
)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (f"https://user:{SECRET}@host/x.qcow2", "https://••••••••@host/x.qcow2"),
        (f"https://{SECRET}@host:8443/x", "https://••••••••@host:8443/x"),
        (f"https://h/x?sig={SECRET}&sv=2024", "https://h/x?sig=••••••••&sv=2024"),
        ("https://h/x.qcow2?version=2", "https://h/x.qcow2?version=2"),
    ],
)
def test_a_url_is_shown_without_its_login_or_signature(address, expected):
    assert url_redacted(address) == expected


@pytest.fixture
def imported(project):
    image = ImageFactory(project=project, name="noble", kind=ImageKind.QCOW2)
    return ImageImport.objects.create(
        project=project, name="noble", format="qcow2", url=URL, status=ImportStatus.DONE,
        image=image,
    )  # fmt: skip


def test_viewers_see_no_credential_of_an_import_on_the_page_in_the_api_or_an_export(
    imported, project, client_for, api_for
):
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    assert "images.example.com/noble.qcow2" in page
    answer = api_for("viewer").get(f"/projects/{project.slug}/image-imports").json()
    assert answer[0]["url"].startswith("https://••••••••@images.example.com/noble.qcow2?")
    for role in ("viewer", "owner"):
        client = client_for(role)
        exported = client.get(reverse("project-manifest", args=[project.slug])).text
        one = client.get(reverse("object-manifest", args=[project.slug, "Image", "noble"])).text
        assert "images.example.com/noble.qcow2" in one
        assert SECRET not in page + str(answer) + exported + one
    assert SECRET not in str(imported)
    assert ImageImport.objects.get().url == URL  # the fetch keeps it
