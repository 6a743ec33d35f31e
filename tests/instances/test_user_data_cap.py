"""User data is capped at 256 KiB, the size the clouds accept, and read within the YAML bounds;
either is told at its field wherever it is given: the create form, the API (and so manifests,
which share its schema and services)."""

import pytest
from django.urls import reverse

from instances.models import Instance
from instances.validators import USER_DATA_MAX_BYTES
from tests.factories import ImageFactory
from tests.instances.api.helpers import errors_of
from tests.instances.test_instance_pages import form_data
from tests.yaml_bombs import billion_laughs, nested

pytestmark = pytest.mark.django_db

OVER_THE_CAP = "#cloud-config\nwrite_files:\n- path: /big\n  content: |\n" + (
    "    " + "x" * 95 + "\n"
) * (USER_DATA_MAX_BYTES // 100 + 1)
CAP_MESSAGE = "User data is at most 256 KiB, the most clouds accept; this is 257 KiB."
DEEP = "#cloud-config\nruncmd: " + nested() + "\n"


def test_the_create_form_tells_the_cap_at_the_user_data_field(client_for, project, subnet):
    data = form_data(subnet, ImageFactory(), user_data_mode="custom", custom_user_data=OVER_THE_CAP)
    response = client_for("operator").post(reverse("instance-new", args=[project.slug]), data)
    assert response.status_code == 200
    assert f'id="custom_user_data-error">{CAP_MESSAGE}' in response.text
    assert not Instance.objects.exists()


@pytest.mark.parametrize("mode", ["custom", "default"])
def test_the_api_tells_the_cap_at_custom_user_data(api_for, subnet, mode):
    body = {"name": "web-1", "zone": "local-1a", "root_image": ImageFactory().pk,
            "root_size_gb": 1, "nics": [{"subnet": subnet.pk}], "user_data_mode": mode,
            "custom_user_data": OVER_THE_CAP}  # fmt: skip
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {"custom_user_data": [CAP_MESSAGE]}
    assert not Instance.objects.exists()


def test_user_data_at_the_cap_is_accepted(api_for, subnet):
    at_cap = OVER_THE_CAP[: USER_DATA_MAX_BYTES - 1].rsplit("\n", 1)[0] + "\n"
    body = {"name": "web-1", "zone": "local-1a", "root_image": ImageFactory().pk,
            "root_size_gb": 1, "nics": [{"subnet": subnet.pk}], "user_data_mode": "custom",
            "custom_user_data": at_cap}  # fmt: skip
    assert api_for("operator").post("/projects/alpha/instances", body).status_code == 201


def test_user_data_nested_ten_thousand_deep_is_a_message_at_its_field(api_for, subnet):
    body = {"name": "web-1", "zone": "local-1a", "root_image": ImageFactory().pk,
            "root_size_gb": 1, "nics": [{"subnet": subnet.pk}], "user_data_mode": "custom",
            "custom_user_data": DEEP}  # fmt: skip
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "custom_user_data": [
            "In the cloud-config: Lists and mappings nest over 64 levels deep here: keep to a "
            "few levels (line 2)."
        ]
    }


def test_user_data_with_the_billion_laughs_is_refused_at_its_field_with_the_line(api_for, subnet):
    body = {"name": "web-1", "zone": "local-1a", "root_image": ImageFactory().pk,
            "root_size_gb": 1, "nics": [{"subnet": subnet.pk}], "user_data_mode": "custom",
            "custom_user_data": "#cloud-config\n" + billion_laughs()}  # fmt: skip
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "custom_user_data": [
            "In the cloud-config: Aliases (*l0) are not accepted: write the value out where it "
            "is used (line 3)."
        ]
    }
    assert not Instance.objects.exists()
