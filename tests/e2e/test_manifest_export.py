"""Export in a browser: a viewer downloads the project's YAML from the overview and a key's from
its row, and the project's admin applies the download back as no change."""

import pytest
import yaml
from playwright.sync_api import expect

from instances.manifests import manifest_apply
from tests.instances.manifests.test_kinds import KEY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

DOCUMENTS = f"""\
kind: Subnet
project: alpha
name: front
spec: {{zone: local-1a, cidr_v4: 10.30.0.0/24}}
---
kind: SSHKey
project: alpha
name: me
spec:
  public_key: {KEY}
---
kind: ElasticIP
project: alpha
name: spare-address
spec: {{}}
"""


def test_a_viewer_downloads_the_projects_yaml_which_applies_back_unchanged(
    page, login, project, owner, viewer, tmp_path
):
    manifest_apply(sources=[("m.yaml", DOCUMENTS)], actor=owner)
    login("viewer")
    page.goto(f"/projects/{project.slug}/")
    with page.expect_download() as started:
        page.get_by_role("link", name="Export YAML", exact=True).click()
    download = started.value
    assert download.suggested_filename == "alpha.yaml"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    text = saved.read_text()
    kinds = [document["kind"] for document in yaml.safe_load_all(text)]
    assert kinds == ["Subnet", "SSHKey", "ElasticIP"]
    plans = manifest_apply(sources=[("alpha.yaml", text)], actor=owner, dry_run=True)
    assert {plan.verb for plan in plans} == {"unchanged"}

    page.goto(f"/projects/{project.slug}/ssh-keys/")
    with page.expect_download() as started:
        page.get_by_role("link", name="Export SSH key me as YAML").click()
    assert started.value.suggested_filename == "alpha-me.yaml"
    expect(page.get_by_role("heading", name="SSH keys")).to_be_visible()
