"""URL imports run by a real Celery worker (on a host queue of its own, with its own images
folder), from a real HTTP server on loopback: an import with a checksum lands and an instance
boots from it to its prompt; a cancelled import leaves nothing; one whose worker is killed is
marked interrupted, leaves nothing, and lands when retried."""

import hashlib
import time
from typing import cast

import pytest
from django.urls import reverse

from instances.backends import backend_named
from instances.choices import ImportStatus, PowerState
from instances.models import Image, ImageImport, Instance, Subnet
from instances.services import image_import_work, power
from instances.services.image_import_work import image_imports_sweep
from instances.services.instances import NicRequest, instance_create
from tests import factories
from tests.factories import SubnetFactory
from tests.fakes.kubevirt.boot_disk import build_boot_disk

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 90


def wait_for(predicate, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return result


def settled(image_import: ImageImport) -> ImageImport:
    def ended() -> bool:
        image_import.refresh_from_db()
        return image_import.status not in (
            ImportStatus.QUEUED, ImportStatus.RUNNING, ImportStatus.CANCELLING
        )  # fmt: skip

    wait_for(ended, f"the import of {image_import.name} to end")
    return image_import


def left_in(images_dir) -> list[str]:
    folder = images_dir / "uploads" / "alpha"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def start(client, project, **fields) -> ImageImport:
    data = {"name": "demo-disk", "format": "qcow2", "os_type": "linux", "sha256": "", **fields}
    url = reverse("image-url-import", args=[project.slug])
    response = client.post(url, {f"import-{key}": value for key, value in data.items()})
    assert response.status_code == 302, response.text
    return ImageImport.objects.latest("pk")


def test_an_import_with_a_checksum_lands_and_an_instance_boots_from_it(
    import_host, client_for, project, operator, image_server, tmp_path, settings
):
    disk = build_boot_disk(tmp_path)
    image_server.serve("/demo-boot.qcow2", disk, rate=4 * 1024 * 1024)
    image_import = start(
        client_for("operator"), project, url=image_server.url("/demo-boot.qcow2"),
        sha256=hashlib.sha256(disk.read_bytes()).hexdigest(),
    )  # fmt: skip
    assert settled(image_import).status == ImportStatus.DONE, image_import.message
    image = image_import.image
    assert image is not None
    assert image.file.read_bytes() == disk.read_bytes()
    assert left_in(settings.ZOPDAY_IMAGES_DIR) == [f"{image.pk}.qcow2"]

    lan = cast(Subnet, SubnetFactory(project=project, name="lan", cidr_v4="10.87.0.0/24",
                                     gateway="10.87.0.1", dns_resolvers=""))  # fmt: skip
    request = factories.instance_request(
        lan, image=image, name="from-url", root_size_gb=image.min_disk_gb,
        nics=[NicRequest(lan, ipv4="10.87.0.10")],
    )  # fmt: skip
    vm = instance_create(project=project, actor=operator, request=request)
    power.instance_start(instance=vm, actor=operator)

    def running() -> bool:
        vm.refresh_from_db()
        return vm.power_state == PowerState.RUNNING

    wait_for(running, "the instance to run")
    log = backend_named("qemu").serial_log(vm.machine_id)
    assert log is not None
    wait_for(lambda: log.exists() and b"root@from-url:/# " in log.read_bytes(), "its prompt")
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for(lambda: Instance.objects.get(pk=vm.pk).power_state == PowerState.STOPPED, "a stop", 30)


def test_a_cancelled_import_stops_its_download_and_leaves_nothing(
    import_host, client_for, project, image_server, settings
):
    body = b"\0" * (8 * 1024 * 1024)
    route = image_server.serve("/big.img", body, rate=256 * 1024)
    image_import = start(client_for("operator"), project, format="raw",
                         url=image_server.url("/big.img"))  # fmt: skip

    def moving() -> bool:
        image_import.refresh_from_db()
        return image_import.bytes_done > 0

    wait_for(moving, "the download to start")
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    assert f'id="import-{image_import.pk}-progress"' in page
    assert "Cancel the import" not in page  # a viewer has no Cancel
    cancel = reverse("image-url-import-cancel", args=[project.slug, image_import.pk])
    assert client_for("viewer").post(cancel).status_code == 403
    page = client_for("operator").post(cancel, follow=True).text
    assert "Cancelling the import of demo-disk." in page
    assert settled(image_import).status == ImportStatus.CANCELLED
    assert route.sent < len(body)
    assert not Image.objects.exists()
    assert left_in(settings.ZOPDAY_IMAGES_DIR) == []


def test_an_import_whose_worker_is_killed_is_marked_interrupted_and_lands_when_retried(
    import_host, client_for, project, image_server, settings, monkeypatch
):
    body = b"\0" * (4 * 1024 * 1024)
    route = image_server.serve("/disk.img", body, hold_after=1024 * 1024)
    image_import = start(client_for("operator"), project, format="raw",
                         url=image_server.url("/disk.img"))  # fmt: skip
    part = settings.ZOPDAY_IMAGES_DIR / "uploads" / "alpha" / f".import-{image_import.pk}.part"
    wait_for(lambda: route.sent >= 1024 * 1024 and part.exists(), "the download to hold")
    import_host.kill()

    monkeypatch.setattr(image_import_work, "STALE_SECONDS", 1)  # no beat for a second: dead

    def interrupted() -> bool:
        image_imports_sweep()
        image_import.refresh_from_db()
        return image_import.status == ImportStatus.FAILED

    wait_for(interrupted, "the sweep to mark the import interrupted", 30)
    assert image_import.message.startswith("Interrupted: the worker stopped during the import")
    assert left_in(settings.ZOPDAY_IMAGES_DIR) == [] and not Image.objects.exists()
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    assert f'id="import-{image_import.pk}-url-error">Interrupted' in page

    route.release.set()
    import_host.start()
    retry = reverse("image-url-import-retry", args=[project.slug, image_import.pk])
    assert "Importing demo-disk again." in client_for("operator").post(retry, follow=True).text
    assert settled(image_import).status == ImportStatus.DONE, image_import.message
    assert image_import.attempt == 2
    image = image_import.image
    assert image is not None
    assert left_in(settings.ZOPDAY_IMAGES_DIR) == [f"{image.pk}.qcow2"]


def test_a_cancel_stops_a_download_the_server_holds_without_waiting_for_the_stall_timeout(
    import_host, client_for, project, image_server, settings
):
    route = image_server.serve("/disk.img", b"\0" * (4 * 1024 * 1024), hold_after=1024 * 1024)
    image_import = start(client_for("operator"), project, format="raw",
                         url=image_server.url("/disk.img"))  # fmt: skip
    part = settings.ZOPDAY_IMAGES_DIR / "uploads" / "alpha" / f".import-{image_import.pk}.part"
    wait_for(lambda: route.sent >= 1024 * 1024 and part.exists(), "the download to hold")
    cancel = reverse("image-url-import-cancel", args=[project.slug, image_import.pk])
    client_for("operator").post(cancel)
    asked = time.monotonic()
    assert settled(image_import).status == ImportStatus.CANCELLED
    assert time.monotonic() - asked < settings.ZOPDAY_IMPORT_STALL_SECONDS  # not the timeout
    assert left_in(settings.ZOPDAY_IMAGES_DIR) == [] and not Image.objects.exists()


def test_a_force_stop_is_done_at_once_while_slow_imports_fill_the_import_pool(
    client_for, project, operator, subnet, image_server, machines_root, tmp_path, settings
):
    from tests.services import HostOfImports

    host = HostOfImports(tmp_path, env={"ZOPDAY_IMPORTS_PER_PROJECT": "4"})
    settings.ZOPDAY_HOST, settings.ZOPDAY_IMAGES_DIR = host.name, host.images
    settings.ZOPDAY_IMPORTS_PER_PROJECT = 4
    host.start()
    try:
        routes = [
            image_server.serve(f"/drip-{n}.img", b"\0" * (1024 * 1024), hold_after=1024)
            for n in range(4)  # as many as the import worker's threads
        ]
        for n in range(4):
            start(client_for("operator"), project, name=f"drip-{n}", format="raw",
                  url=image_server.url(f"/drip-{n}.img"))  # fmt: skip
        downloading = ImageImport.objects.filter(status=ImportStatus.RUNNING)
        wait_for(lambda: downloading.count() == 4, "every import thread to be taken")
        assert all(route.requests == 2 for route in routes)  # the probe, then the download

        vm = instance_create(
            project=project, actor=operator, request=factories.instance_request(subnet)
        )
        Instance.objects.filter(pk=vm.pk).update(power_state=PowerState.RUNNING)
        vm.refresh_from_db()
        power.instance_force_stop(instance=vm, actor=operator)
        wait_for(lambda: Instance.objects.get(pk=vm.pk).power_state == PowerState.STOPPED,
                 "the host worker to stop the instance", 30)  # fmt: skip
        assert downloading.count() == 4  # still held
    finally:
        image_server.stop()  # releases the held downloads
        host.stop()
