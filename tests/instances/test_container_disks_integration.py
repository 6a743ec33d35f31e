"""Instances booting from a container disk pulled from a real registry on loopback, through the
console and a real Celery worker, on each platform: this console's QEMU hosts (the worker pulls
into the shared cache) and KubeVirt (a containerDisk volume, which the fake's nodes pull
through the same cache)."""

import shutil
import subprocess

import pytest
from django.urls import reverse

from instances.choices import DiskRole, ImageKind, PowerState
from instances.containerdisks.cache import cache_root, cached_file
from instances.models import Disk, Instance
from instances.services import power
from instances.services.container_disks import registry_credential_set
from instances.services.instances import DiskRequest
from tests.factories import ImageFactory
from tests.fakes.kubevirt.store import BY_KIND
from tests.instances.platforms import Platform
from tests.instances.test_machines_integration import run_in, wait_for_prompt, wait_for_state
from tests.instances.test_storage_integration import block_devices, started
from tests.oci_registry import PASSWORD, USER, oci_layout

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MARK, SECTOR = "ZOPDAY-WROTE-THIS", 20000  # past the boot files' clusters in the FAT image
PAST_THE_IMAGE = 2_000_000  # near the end of a 1 GiB disk grown from the small boot image


@pytest.fixture
def lan(platform, project):
    return platform.lan(project)


def from_registry(platform: Platform, operator, lan, reference: str, name: str, ip: str):
    """An instance whose only source is a container disk (its root disk is blank)."""
    image = ImageFactory(
        kind=ImageKind.CONTAINER, name=f"{name}-image", path="", reference=reference
    )
    return platform.make(
        operator, None, lan, name, ip, root_image=None,
        disks=[DiskRequest(size_gb=0, role=DiskRole.CONTAINER, image=image, name=f"{name}-cd")],
    )  # fmt: skip


def container_device(platform: Platform, vm: Instance) -> str:
    serial = f"{vm.name}-cd"[:20]
    return next(f"/dev/{n}" for n, (s, _) in block_devices(platform, vm).items() if s == serial)


def read_mark(platform: Platform, vm: Instance, device: str, sector: int = SECTOR) -> str:
    script = f"dd if={device} bs=512 skip={sector} count=1 2>/dev/null | head -c {len(MARK)}"
    return run_in(platform, vm, script)


def test_an_instance_boots_from_a_container_disk_and_forgets_its_writes_at_a_restart(
    platform, project, operator, lan, demo_container_disk, client_for, api_for
):
    reference, digest = demo_container_disk
    vm = started(
        platform,
        operator,
        from_registry(platform, operator, lan, reference, "oci-vm", "10.88.0.60"),
    )
    disk = Disk.objects.get(instance=vm, role=DiskRole.CONTAINER)
    assert disk.digest == digest  # the digest it runs, pinned at its first pull
    assert cached_file(digest).is_file()
    detail = reverse("instance-detail", args=[project.slug, vm.pk])
    page = client_for("operator").get(f"{detail}?tab=storage").content.decode()
    assert f"<code>{digest}</code>" in page
    shown = api_for("operator").get(f"/projects/{project.slug}/disks/{disk.pk}").json()
    assert shown["digest"] == digest
    device = container_device(platform, vm)
    assert read_mark(platform, vm, device) != MARK
    run_in(
        platform,
        vm,
        f"printf {MARK} | dd of={device} bs=512 seek={SECTOR} conv=notrunc,fsync 2>/dev/null",
    )
    assert read_mark(platform, vm, device) == MARK

    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    if platform.name == "qemu":  # the overlay went with the run
        assert not (platform.guest(vm)[0].root / "disks" / f"{disk.device_name}.qcow2").exists()
    started(platform, operator, vm, boots=2)
    assert read_mark(platform, vm, container_device(platform, vm)) != MARK  # a fresh overlay
    assert run_in(platform, vm, "cat /data/boot-count") == "2"  # the root disk keeps its writes
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)


@pytest.mark.parametrize("platform", ["qemu"], indirect=True)
def test_two_instances_share_one_cached_copy(platform, project, operator, lan, demo_container_disk):
    reference, digest = demo_container_disk
    vms = [
        from_registry(platform, operator, lan, reference, f"share-{n}", f"10.88.0.7{n}")
        for n in (1, 2)
    ]
    for vm in vms:
        power.instance_start(instance=vm, actor=operator)
    for vm in vms:
        wait_for_state(vm, PowerState.RUNNING)
        wait_for_prompt(platform, vm)
    overlays = [
        platform.guest(vm)[0].root
        / "disks"
        / f"{Disk.objects.get(instance=vm, role=DiskRole.CONTAINER).device_name}.qcow2"
        for vm in vms
    ]
    backings = set()
    for overlay in overlays:
        info = subprocess.run(
            ["qemu-img", "info", "-U", str(overlay)], capture_output=True, text=True, check=True
        )
        backings |= {
            line.split(": ", 1)[1]
            for line in info.stdout.splitlines()
            if line.startswith("backing file:")
        }
    assert backings == {str(cached_file(digest))}
    assert [
        p.name for p in cache_root().iterdir() if p.name.startswith(digest.replace(":", "-"))
    ] == [digest.replace(":", "-")]
    for vm in vms:
        power.instance_force_stop(instance=vm, actor=operator)
        wait_for_state(vm, PowerState.STOPPED, timeout=60)


@pytest.mark.parametrize("platform", ["qemu"], indirect=True)
def test_a_container_disk_that_cannot_be_pulled_fails_the_start_with_its_reason(
    platform, project, operator, lan, oci_registry
):
    vm = from_registry(
        platform, operator, lan, f"{oci_registry.address}/nothing/here:1", "gone-vm", "10.88.0.80"
    )
    power.instance_start(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.FAILED, timeout=120)
    assert vm.power_message == (
        f"gone-vm-cd: {oci_registry.address} has no image nothing/here:1: check the repository and tag."
    )
    assert Disk.objects.get(instance=vm, role=DiskRole.CONTAINER).digest == ""
    assert not [p for p in cache_root().iterdir() if p.name.startswith(".pull-")]


def private_image(project, owner, registry, boot_disk, tmp_path, name: str) -> tuple[str, str]:
    """The demo guest pushed to the private registry as `name`, and the project's login there:
    its reference and digest."""
    layout = oci_layout(tmp_path / "layout", {"disk/demo.qcow2": boot_disk})
    digest = registry.push(layout, name)
    registry_credential_set(
        project=project, actor=owner, registry=registry.address, username=USER, password=PASSWORD
    )
    return f"{registry.address}/{name}", digest


def test_a_private_registry_is_pulled_from_with_the_projects_login(
    platform, project, owner, operator, lan, oci_auth_registry, demo_boot_disk, tmp_path
):
    reference, digest = private_image(
        project, owner, oci_auth_registry, demo_boot_disk, tmp_path, "private/demo:1"
    )
    vm = started(
        platform,
        operator,
        from_registry(platform, operator, lan, reference, "priv-vm", "10.88.0.90"),
    )
    assert Disk.objects.get(instance=vm, role=DiskRole.CONTAINER).digest == digest
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    shutil.rmtree(cached_file(digest).parent, ignore_errors=True)  # the session's images go


def test_a_root_disk_copied_from_a_private_registry_image_boots_and_keeps_its_writes(
    platform, project, owner, operator, lan, oci_auth_registry, demo_boot_disk, tmp_path, request
):
    """A registry's image as a persistent disk: on this console's hosts a disk over the pulled
    copy, on KubeVirt a DataVolume imported from the registry with the project's login."""
    reference, digest = private_image(
        project, owner, oci_auth_registry, demo_boot_disk, tmp_path, "private/root:1"
    )
    image = ImageFactory(kind=ImageKind.CONTAINER, name="root-image", path="", reference=reference)
    vm = started(platform, operator, platform.make(operator, image, lan, "copy-vm", "10.88.0.95"))
    root = Disk.objects.get(instance=vm, role=DiskRole.ROOT)
    assert root.digest == digest
    device = next(
        f"/dev/{name}" for name, (serial, _) in block_devices(platform, vm).items()
        if serial == root.name[:20]
    )  # fmt: skip
    run_in(
        platform,
        vm,
        f"printf {MARK} | dd of={device} bs=512 seek={PAST_THE_IMAGE} conv=notrunc,fsync",
    )
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    started(platform, operator, vm, boots=2)
    assert read_mark(platform, vm, device, PAST_THE_IMAGE) == MARK  # unlike a container disk
    if platform.name == "kubevirt":  # CDI imported it from the registry, by digest
        store = request.getfixturevalue("kube_api").store
        volumes = [body for (kind, _, _), body in store.objects.items()
                   if kind.kind == "DataVolume" and "registry" in body["spec"]["source"]]  # fmt: skip
        assert len(volumes) == 1
        registry = volumes[0]["spec"]["source"]["registry"]
        assert registry["url"] == f"docker://{oci_auth_registry.address}/private/root@{digest}"
        secret = store.get(BY_KIND["Secret"], volumes[0]["metadata"]["namespace"],
                           registry["secretRef"])  # fmt: skip
        assert secret["stringData"] == {"accessKeyId": USER, "secretKey": PASSWORD}
    power.instance_force_stop(instance=vm, actor=operator)
    wait_for_state(vm, PowerState.STOPPED, timeout=60)
    shutil.rmtree(cached_file(digest).parent, ignore_errors=True)  # the session's images go
