"""Every object the KubeVirt backend builds validates against KubeVirt's, CDI's and Multus's
schemas (the vendored OpenAPI documents), and carries each field of the instance."""

from pathlib import Path

import pytest

from instances.backends.base import (
    BackendError,
    CloudInitSeed,
    DiskSpec,
    FirmwareSpec,
    MachineSpec,
    NicSpec,
)
from instances.backends.kubevirt import manifests
from instances.backends.kubevirt.manifests import Placement
from tests.fakes.kubevirt import schemas

ROOT = DiskSpec("disk-1", "root", "virtio", 10, Path("/images/debian.qcow2"), 1, "root")
DATA = DiskSpec("disk-2", "secondary", "sata", 20, None, None, "data")
CDROM = DiskSpec("disk-3", "cdrom", "sata", 0, Path("/images/tools.iso"), 2)
CONTAINER = DiskSpec("disk-4", "container", "virtio", reference="registry.local/demo:1")
SEED = CloudInitSeed("instance-id: i-7\n", "#cloud-config\n", "version: 2\n")
SHAPES = {
    "bios, pod network": MachineSpec(
        "i-7", "web", 2, 1, 2, 1, 2048, disks=(ROOT,),
        nics=(NicSpec("eth0", "02:00:00:00:00:07", "virtio"),), seed=SEED,
    ),
    "uefi secure boot, vtpm, subnets": MachineSpec(
        "i-8", "db", 4, 2, 2, 1, 4096,
        firmware=FirmwareSpec("uefi", secure_boot=True, persistent_efi=True, vtpm=True),
        disks=(ROOT, DATA, CDROM),
        nics=(
            NicSpec("eth0", "02:00:00:00:00:08", "virtio", network="seg-1"),
            NicSpec("eth1", "02:00:00:00:00:09", "e1000", link_up=False, network="seg-2"),
        ),
        seed=SEED,
    ),
    "container disk, direct kernel": MachineSpec(
        "i-9", "demo", 1, 1, 1, 1, 512, disks=(CONTAINER,),
        nics=(NicSpec("eth0", "02:00:00:00:00:0a", "virtio"),),
        kernel=Path("/images/demo/vmlinuz"), initrd=Path("/images/demo/initrd.img"),
        kernel_cmdline="console=ttyS0",
    ),
}  # fmt: skip
PLACEMENT = Placement("zop-p1", "Halted", zone="zone-a", kernel_image="registry.local/kernel:1")
NETWORKS = {"seg-1": "seg-1", "seg-2": "seg-2"}


def image_url(disk: DiskSpec) -> str:
    return f"http://console.local/images/{disk.source.name}"


def built(spec: MachineSpec) -> list[dict]:
    objects = [manifests.virtual_machine(spec, PLACEMENT, networks=NETWORKS, image_url=image_url)]
    objects += [manifests.network_attachment(segment, "zop-p1") for segment in NETWORKS]
    if (secret := manifests.seed_secret(spec, "zop-p1")) is not None:
        objects.append(secret)
    return objects


@pytest.mark.parametrize("spec", SHAPES.values(), ids=SHAPES.keys())
def test_each_object_validates_against_the_schemas_with_no_field_unknown(spec):
    for body in built(spec):
        verdict = schemas.validate(body["kind"], body)
        assert verdict.causes == [] and verdict.unknown == [], body["kind"]
    for template in built(spec)[0]["spec"]["dataVolumeTemplates"]:
        data_volume = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", **template}
        assert schemas.validate("DataVolume", data_volume) == schemas.Verdict()


def test_the_schemas_do_refuse_what_they_do_not_declare():
    """The check above is worth something: a wrong type and a stray field are both caught."""
    body = built(SHAPES["bios, pod network"])[0]
    body["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = "two"
    body["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["buss"] = "virtio"
    verdict = schemas.validate("VirtualMachine", body)
    assert [field for field, _ in verdict.causes] == ["spec.template.spec.domain.cpu.cores"]
    assert verdict.unknown == ["spec.template.spec.domain.devices.disks[0].buss"]


def test_every_instance_field_lands_in_the_virtual_machine():
    vm = built(SHAPES["uefi secure boot, vtpm, subnets"])[0]
    template = vm["spec"]["template"]["spec"]
    domain = template["domain"]
    assert vm["spec"]["runStrategy"] == "Halted"
    assert domain["cpu"] == {"sockets": 2, "cores": 2, "threads": 1}
    assert domain["memory"] == {"guest": "4096Mi"}
    assert domain["firmware"]["bootloader"] == {"efi": {"secureBoot": True, "persistent": True}}
    assert domain["features"]["smm"] == {"enabled": True}
    assert domain["devices"]["tpm"] == {"persistent": True}
    disks = {disk["name"]: disk for disk in domain["devices"]["disks"]}
    assert disks["disk-1"] == {"name": "disk-1", "disk": {"bus": "virtio"}, "bootOrder": 1,
                               "serial": "root"}  # fmt: skip
    assert disks["disk-2"]["disk"] == {"bus": "sata"}
    assert disks["disk-3"]["cdrom"] == {"bus": "sata", "readonly": True}
    sources = {t["metadata"]["name"]: t["spec"] for t in vm["spec"]["dataVolumeTemplates"]}
    assert sources["i-8-disk-1"]["source"] == {
        "http": {"url": "http://console.local/images/debian.qcow2"}
    }
    assert sources["i-8-disk-1"]["storage"]["resources"]["requests"]["storage"] == "10Gi"
    assert sources["i-8-disk-2"]["source"] == {"blank": {}}
    for data_volume in vm["spec"]["dataVolumeTemplates"]:  # found by the machine, as its VM is
        assert data_volume["metadata"]["labels"][manifests.MACHINE_LABEL] == "i-8"
    assert domain["devices"]["interfaces"] == [
        {"name": "eth0", "macAddress": "02:00:00:00:00:08", "model": "virtio", "bridge": {}},
        {"name": "eth1", "macAddress": "02:00:00:00:00:09", "model": "e1000", "bridge": {},
         "state": "down"},
    ]  # fmt: skip
    assert template["networks"] == [
        {"name": "eth0", "multus": {"networkName": "seg-1", "default": True}},
        {"name": "eth1", "multus": {"networkName": "seg-2"}},
    ]
    assert template["nodeSelector"] == {"topology.kubernetes.io/zone": "zone-a"}
    assert {"name": "cloudinit", "cloudInitNoCloud": {
        "secretRef": {"name": "i-8-cloudinit"}, "networkDataSecretRef": {"name": "i-8-cloudinit"},
    }} in template["volumes"]  # fmt: skip


def test_user_data_goes_in_a_secret_not_in_the_virtual_machine():
    spec = SHAPES["bios, pod network"]
    vm, *_, secret = built(spec)
    assert "#cloud-config" not in str(vm)
    assert secret["stringData"] == {"userdata": "#cloud-config\n", "networkdata": "version: 2\n"}


def test_a_direct_kernel_boot_and_a_container_disk_map_to_kubevirts_own():
    domain_spec = built(SHAPES["container disk, direct kernel"])[0]["spec"]["template"]["spec"]
    assert domain_spec["domain"]["firmware"]["kernelBoot"] == {
        "kernelArgs": "console=ttyS0",
        "container": {"image": "registry.local/kernel:1", "kernelPath": "/boot/vmlinuz",
                      "initrdPath": "/boot/initrd.img"},
    }  # fmt: skip
    assert {"name": "disk-4", "containerDisk": {"image": "registry.local/demo:1"}} in (
        domain_spec["volumes"]
    )


@pytest.mark.parametrize(
    ("spec", "placement", "message"),
    [
        (
            MachineSpec("i-1", "x", 1, 1, 1, 1, 512, firmware=FirmwareSpec(secure_boot=True)),
            PLACEMENT, "need UEFI firmware",
        ),
        (SHAPES["container disk, direct kernel"], Placement("ns", "Halted"), "kernel image"),
        (
            MachineSpec("i-1", "x", 1, 1, 1, 1, 512,
                        nics=(NicSpec("eth0", "02:00:00:00:00:01", "virtio", network="seg-9"),)),
            PLACEMENT, "no network on the cluster",
        ),
        (
            MachineSpec("i-1", "x", 1, 1, 1, 1, 512,
                        disks=(DiskSpec("disk-1", "container", "virtio"),)),
            PLACEMENT, "image reference",
        ),
    ],
    ids=["secure boot on BIOS", "kernel without a kernel image", "unknown subnet",
         "container disk without a reference"],
)  # fmt: skip
def test_what_kubevirt_has_no_place_for_is_refused_not_dropped(spec, placement, message):
    with pytest.raises(BackendError, match=message):
        manifests.virtual_machine(spec, placement, networks=NETWORKS, image_url=image_url)
