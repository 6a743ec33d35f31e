"""The Images page in a browser: an operator uploads a qcow2 cloud image, is told at the file
field when a file is not one, and removes the image."""

import subprocess

import pytest
from playwright.sync_api import expect

from instances.models import Image

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


@pytest.fixture(autouse=True)
def images_dir(settings, tmp_path):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"


def test_an_operator_uploads_a_cloud_image_and_removes_it(page, login, project, operator, tmp_path):
    cloud = tmp_path / "noble.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(cloud), "2G"], check=True)
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    login("operator")
    page.goto(f"/projects/{project.slug}/images/")
    form = page.locator("#image-upload")

    form.get_by_label("Name").fill("ubuntu-noble")
    form.get_by_label("Kind").select_option("qcow2")
    form.locator("input[type=file]").set_input_files(str(text))
    form.get_by_role("button", name="Upload and register").click()
    expect(page.locator("#file-error")).to_contain_text("This file is not a qcow2 image")
    expect(form.get_by_label("Name")).to_have_value("ubuntu-noble")

    form.locator("input[type=file]").set_input_files(str(cloud))
    form.get_by_role("button", name="Upload and register").click()
    expect(
        page.get_by_text("Image ubuntu-noble registered (root disks of 2 GB or more).")
    ).to_be_visible()
    row = page.locator("tr", has_text="ubuntu-noble")
    expect(row).to_contain_text("qcow2 cloud image")
    expect(row).to_contain_text("2 GB")

    row.get_by_role("button", name="Remove image ubuntu-noble").click()
    expect(page.get_by_text("Image ubuntu-noble removed.")).to_be_visible()
    assert not Image.objects.filter(name="ubuntu-noble").exists()
