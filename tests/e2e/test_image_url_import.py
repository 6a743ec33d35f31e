"""Import from a URL in a browser: an operator imports the demo guest's bootable disk from a
slow loopback server, watches the progress bar move, then boots an instance from the image."""

import hashlib
import time

import pytest
from playwright.sync_api import expect

from instances.backends import backend_named
from instances.models import Instance
from instances.services import power
from tests.fakes.kubevirt.boot_disk import build_boot_disk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]

BOOT_TIMEOUT = 120_000  # ms


def test_an_operator_imports_from_a_url_watches_progress_and_boots_from_it(
    page, login, project, operator, subnet, import_host, image_server, tmp_path
):
    disk = build_boot_disk(tmp_path)
    size = disk.stat().st_size
    image_server.serve("/demo-boot.qcow2", disk, rate=size // 8)  # about 8 s
    login("operator")
    page.goto(f"/projects/{project.slug}/images/")
    form = page.locator("#image-url-import")
    form.get_by_label("Name").fill("demo-disk")
    form.get_by_label("Format").select_option("qcow2")
    form.get_by_label("URL").fill(image_server.url("/demo-boot.qcow2"))
    form.get_by_label("SHA-256").fill(hashlib.sha256(disk.read_bytes()).hexdigest())
    form.get_by_role("button", name="Import").click()
    expect(page.get_by_text("Importing demo-disk: its progress shows below.")).to_be_visible()

    bar = page.get_by_label("Progress of demo-disk")
    expect(bar).to_have_attribute("max", str(size))
    seen = []
    for _ in range(3):  # each poll (no reload) shows more bytes
        value = bar.get_attribute("value") or "0"
        seen.append(int(value))
        expect(bar).not_to_have_attribute("value", value, timeout=30_000)
    seen.append(int(bar.get_attribute("value") or "0"))
    assert seen == sorted(seen) and seen[-1] > seen[0] and seen[-1] < size, seen
    expect(page.locator(".import-figures")).to_contain_text("/s")
    expect(page.get_by_text("Imported as image demo-disk.")).to_be_visible(timeout=60_000)
    expect(page.locator("#image-catalog tr", has_text="demo-disk")).to_contain_text("1 GB")

    page.goto(f"/projects/{project.slug}/instances/new/")
    page.fill("#id_name", "url-vm")
    page.select_option("#id_root_image", label="demo-disk")
    page.fill("#id_nics-0-ipv4", "10.20.0.60")
    page.get_by_role("button", name="Create instance").click()
    expect(page.locator("h1")).to_contain_text("url-vm")
    page.click("button[data-action=start]")
    expect(page.locator("#power-panel .badge.state")).to_have_text("Running", timeout=BOOT_TIMEOUT)
    vm = Instance.objects.get(name="url-vm")
    log = backend_named("qemu").serial_log(vm.machine_id)
    assert log is not None
    deadline = time.monotonic() + 90
    while not (log.exists() and b"root@url-vm:/# " in log.read_bytes()):
        assert time.monotonic() < deadline, "the guest did not reach its prompt"
        page.wait_for_timeout(250)
    power.instance_force_stop(instance=vm, actor=operator)
