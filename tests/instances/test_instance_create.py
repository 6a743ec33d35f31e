"""Creating an instance: every rule has a message at its field, and nothing is half-created."""

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from instances.backends.qemu.cmdline import LaunchOptions, build_argv
from instances.backends.qemu.run_folder import RunFolder
from instances.choices import DiskRole, ImageKind, IpMode, PowerState, RunStrategy
from instances.errors import ActionRefused
from instances.models import Disk, Instance, IPLease, NetworkInterface
from instances.services.instances import DiskRequest, NicRequest, instance_create
from instances.specs import machine_spec
from tests.broker import BrokerQueue
from tests.factories import ImageFactory, SubnetFactory, instance_request

pytestmark = pytest.mark.django_db


def errors_of(project, actor, request) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        instance_create(project=project, actor=actor, request=request)
    assert not Instance.objects.exists(), "a failed create must leave nothing behind"
    assert not Disk.objects.exists() and not IPLease.objects.exists()
    return caught.value.message_dict


def test_it_creates_an_instance_with_root_disk_nic_and_lease(project, operator, subnet):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    assert instance.power_state == PowerState.STOPPED
    assert instance.topology == (1, 1, 1)
    root = instance.disks.get()
    assert (root.role, root.name, root.zone, root.boot_order) == (
        DiskRole.ROOT,
        "web-1-root",
        "local-1a",
        1,
    )
    nic = instance.nics.get()
    assert (nic.name, nic.primary, nic.ip_mode, nic.ipv4) == (
        "eth0",
        True,
        IpMode.AUTO,
        "10.20.0.2",
    )
    assert nic.mac.startswith("52:54:00:")
    assert IPLease.objects.get().address == "10.20.0.2"
    assert len(instance.initial_password) >= 12


def test_ipam_gives_the_next_free_address(project, operator, subnet):
    instance_create(project=project, actor=operator, request=instance_request(subnet))
    second = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="web-2")
    )
    assert second.nics.get().ipv4 == "10.20.0.3"


def test_a_viewer_cannot_create_instances(project, viewer, subnet):
    with pytest.raises(ActionRefused, match="operator role"):
        instance_create(project=project, actor=viewer, request=instance_request(subnet))


def test_topology_must_multiply_to_the_vcpu_count(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, vcpus=4, sockets=1, cores=2, threads=1)
    )
    assert errors["sockets"] == [
        "sockets × cores × threads is 1 × 2 × 1 = 2, but the instance has 4 vCPU."
    ]


def test_an_explicit_topology_is_used(project, operator, subnet):
    request = instance_request(subnet, vcpus=8, sockets=2, cores=2, threads=2)
    assert instance_create(project=project, actor=operator, request=request).topology == (2, 2, 2)


def test_a_partial_topology_is_refused(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, vcpus=2, sockets=2))
    assert errors["sockets"] == ["Give sockets, cores and threads together, or none of them."]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("vcpus", "Choose a vCPU count of 1, 2, 4, 8, 16 or 32."),
        ("memory_gb", "Choose a RAM size of 1, 2, 4, 8, 16, 32 or 64 GB."),
    ],
)
def test_sizes_outside_the_offered_sets_are_refused(project, operator, subnet, field, message):
    errors = errors_of(project, operator, instance_request(subnet, **{field: 3}))
    assert errors[field] == [message]


def test_secure_boot_requires_uefi(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, secure_boot=True))
    assert errors["secure_boot"] == ["Secure Boot requires the UEFI bootloader."]


def test_persistent_efi_requires_uefi(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, persistent_efi=True))
    assert errors["persistent_efi"] == ["Persistent EFI requires the UEFI bootloader."]


def test_uefi_with_secure_boot_and_vtpm_is_accepted(project, operator, subnet):
    request = instance_request(
        subnet, bootloader="uefi", secure_boot=True, persistent_efi=True, vtpm=True
    )
    instance = instance_create(project=project, actor=operator, request=request)
    assert (instance.bootloader, instance.secure_boot, instance.persistent_efi, instance.vtpm) == (
        "uefi", True, True, True,
    )  # fmt: skip


def test_custom_user_data_is_validated(project, operator, subnet):
    errors = errors_of(
        project,
        operator,
        instance_request(subnet, user_data_mode="custom", custom_user_data="runcmd: []"),
    )
    assert errors["custom_user_data"] == [
        "Custom user data must start with the line #cloud-config."
    ]


def test_the_name_must_be_a_hostname(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, name="Web_1"))
    assert "lowercase letters" in errors["name"][0]


def test_an_unknown_zone_lists_the_zones(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, zone="mars-1"))
    assert errors["zone"] == ["Choose one of the zones: local-1a, local-1b."]


def test_at_least_one_subnet_is_needed(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, nics=[]))
    assert errors["nics"] == ["Attach the instance to at least one subnet."]


def test_a_static_ip_must_be_inside_the_subnet(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, nics=[NicRequest(subnet, ipv4="10.99.0.5")])
    )
    assert errors["nics-0-ipv4"] == ["10.99.0.5 is outside subnet backend (10.20.0.0/24)."]


def test_a_static_ip_must_not_be_leased(project, operator, subnet):
    instance_create(project=project, actor=operator, request=instance_request(subnet))
    with pytest.raises(ValidationError) as caught:
        instance_create(
            project=project,
            actor=operator,
            request=instance_request(
                subnet, name="web-2", nics=[NicRequest(subnet, ipv4="10.20.0.2")]
            ),
        )
    assert caught.value.message_dict["nics-0-ipv4"] == ["10.20.0.2 is already leased in backend."]
    assert Instance.objects.count() == 1


def test_the_gateway_cannot_be_a_static_ip(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, nics=[NicRequest(subnet, ipv4="10.20.0.1")])
    )
    assert errors["nics-0-ipv4"] == [
        "10.20.0.1 is the network, broadcast or gateway address of backend."
    ]


def test_an_ipv6_address_needs_an_ipv6_range(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, nics=[NicRequest(subnet, ipv6="fd00::5")])
    )
    assert errors["nics-0-ipv6"] == ["Subnet backend has no IPv6 range."]


def test_an_ipv4_field_refuses_an_ipv6_address(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, nics=[NicRequest(subnet, ipv4="fd00::5")])
    )
    assert errors["nics-0-ipv4"] == ["fd00::5 is not an IPv4 address."]


def test_static_ipv6_in_a_dual_stack_subnet(project, operator):
    dual = SubnetFactory(
        project=project, cidr_v4="10.30.0.0/24", gateway="10.30.0.1", cidr_v6="fd00:30::/64"
    )
    request = instance_request(dual, nics=[NicRequest(dual, ipv4="10.30.0.9", ipv6="fd00:30::9")])
    nic = instance_create(project=project, actor=operator, request=request).nics.get()
    assert (nic.ip_mode, nic.ipv4, nic.ipv6) == (IpMode.STATIC, "10.30.0.9", "fd00:30::9")


def test_a_hyphenated_static_mac_is_refused_at_its_field(project, operator, subnet):
    errors = errors_of(
        project,
        operator,
        instance_request(subnet, nics=[NicRequest(subnet, mac="52-54-00-aa-bb-cc")]),
    )
    assert errors["nics-0-mac"] == [
        "Use colon notation for MAC addresses: 52:54:00:aa:bb:cc, not 52-54-00-aa-bb-cc."
    ]


def test_a_static_mac_must_be_unused(project, operator, subnet):
    instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, nics=[NicRequest(subnet, mac="52:54:00:aa:bb:cc")]),
    )
    with pytest.raises(ValidationError) as caught:
        instance_create(
            project=project, actor=operator,
            request=instance_request(subnet, name="web-2", nics=[NicRequest(subnet, mac="52:54:00:AA:BB:CC")]),
        )  # fmt: skip
    assert caught.value.message_dict["nics-0-mac"] == [
        "52:54:00:aa:bb:cc is already used by another interface."
    ]


def test_nics_are_named_in_order_and_only_eth0_is_primary(project, operator, subnet):
    other = SubnetFactory(project=project, cidr_v4="10.40.0.0/24", gateway="10.40.0.1")
    request = instance_request(subnet, nics=[NicRequest(subnet), NicRequest(other, model="e1000")])
    nics = list(instance_create(project=project, actor=operator, request=request).nics.all())
    assert [(n.name, n.primary, n.model) for n in nics] == [
        ("eth0", True, "virtio"),
        ("eth1", False, "e1000"),
    ]


def test_a_subnet_of_another_zone_is_refused(project, operator, subnet):
    far = SubnetFactory(
        project=project, zone="local-1b", cidr_v4="10.50.0.0/24", gateway="10.50.0.1"
    )
    errors = errors_of(project, operator, instance_request(subnet, nics=[NicRequest(far)]))
    assert errors["nics-0-subnet"] == [
        "Subnet net" + far.name[3:] + " is in local-1b; the instance is in local-1a."
    ]


def test_a_subnet_of_another_project_is_refused(project, operator, subnet, other_project):
    foreign = SubnetFactory(project=other_project, cidr_v4="10.60.0.0/24", gateway="10.60.0.1")
    errors = errors_of(project, operator, instance_request(subnet, nics=[NicRequest(foreign)]))
    assert errors["nics-0-subnet"] == ["Choose a subnet of this project."]


def test_a_root_disk_smaller_than_its_image_is_refused(project, operator, subnet):
    image = ImageFactory(kind=ImageKind.QCOW2, min_disk_gb=10, name="debian-12")
    errors = errors_of(project, operator, instance_request(subnet, image=image, root_size_gb=5))
    assert errors["root_size_gb"] == ["debian-12 needs a disk of at least 10 GB."]


def test_the_root_disk_needs_an_image_or_a_cdrom_to_install_from(project, operator, subnet):
    errors = errors_of(project, operator, instance_request(subnet, root_image=None))
    assert errors == {
        "root_image": [
            "Choose an image for the root disk, or leave it blank and add a CD-ROM with an ISO "
            "to install from."
        ]
    }
    # said with the instance's own mistakes too
    errors = errors_of(project, operator, instance_request(subnet, root_image=None, vcpus=3))
    assert set(errors) == {"root_image", "vcpus"}


def test_a_blank_root_disk_installs_from_the_cdrom_which_boots_after_it(project, operator, subnet):
    iso = ImageFactory(kind=ImageKind.ISO, name="installer", path="/srv/isos/installer.iso")
    request = instance_request(
        subnet, root_image=None, root_size_gb=8,
        disks=[DiskRequest(size_gb=0, role=DiskRole.CDROM, image=iso)],
    )  # fmt: skip
    instance = instance_create(project=project, actor=operator, request=request)
    root = instance.disks.get(role=DiskRole.ROOT)
    cdrom = instance.disks.get(role=DiskRole.CDROM)
    assert (root.image, root.size_gb, root.boot_order) == (None, 8, 1)
    assert (cdrom.image, cdrom.boot_order) == (iso, 2)

    spec = machine_spec(instance)
    disks = {disk.role: disk for disk in spec.disks}
    assert disks["root"].source is None and disks["root"].size_gb == 8  # a new, empty qcow2
    assert disks["cdrom"].source == Path("/srv/isos/installer.iso") and spec.kernel is None
    argv = build_argv(spec, RunFolder(Path("/run/zq") / spec.id), LaunchOptions())
    boot = {d.split("id=")[1].split(",")[0]: d for d in argv if "bootindex=" in d}
    assert [
        f"bootindex={n}" in boot[disks[role].name] for role, n in (("root", 1), ("cdrom", 2))
    ] == [
        True,
        True,
    ]


def test_an_iso_cannot_back_the_root_disk(project, operator, subnet):
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    errors = errors_of(project, operator, instance_request(subnet, image=iso))
    assert errors["root_image"] == ["rescue cannot back a disk; choose a qcow2 or container image."]


def test_a_container_disk_needs_a_container_image_with_a_valid_reference(project, operator, subnet):
    oci = ImageFactory(kind=ImageKind.CONTAINER, name="oci", path="", reference="ubuntu:22")
    qcow = ImageFactory(kind=ImageKind.QCOW2, name="debian")
    errors = errors_of(
        project,
        operator,
        instance_request(
            subnet,
            disks=[
                DiskRequest(size_gb=1, role=DiskRole.CONTAINER, image=oci),
                DiskRequest(size_gb=1, role=DiskRole.CONTAINER, image=qcow),
            ],
        ),
    )
    assert "oci: Start the reference with the registry's host name" in errors["disks-0-image"][0]
    assert errors["disks-1-image"] == [
        "A container disk holds a container image (an OCI reference)."
    ]


def test_a_container_disk_boots_over_a_blank_root_disk(project, operator, subnet):
    oci = ImageFactory(kind=ImageKind.CONTAINER, name="oci", path="", reference="quay.io/x/y:1")
    request = instance_request(
        subnet, root_image=None, disks=[DiskRequest(size_gb=0, role=DiskRole.CONTAINER, image=oci)]
    )
    vm = instance_create(project=project, actor=operator, request=request)
    container = vm.disks.get(role=DiskRole.CONTAINER)
    assert container.boot_order == 1 and container.size_gb == 1 and container.digest == ""
    assert vm.disks.get(role=DiskRole.ROOT).boot_order == 2


def test_a_cdrom_must_hold_an_iso(project, operator, subnet):
    qcow = ImageFactory(kind=ImageKind.QCOW2, name="debian")
    errors = errors_of(
        project,
        operator,
        instance_request(subnet, disks=[DiskRequest(size_gb=1, role=DiskRole.CDROM, image=qcow)]),
    )
    assert errors["disks-0-image"] == ["A CD-ROM holds an ISO image; debian is not one."]


def test_secondary_disks_and_a_cdrom_are_created_with_the_instance(project, operator, subnet):
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    request = instance_request(
        subnet,
        disks=[
            DiskRequest(size_gb=5, bus="sata"),
            DiskRequest(size_gb=0, role=DiskRole.CDROM, image=iso),
        ],
    )
    instance = instance_create(project=project, actor=operator, request=request)
    assert sorted(instance.disks.values_list("role", "size_gb", "bus")) == [
        ("cdrom", 0, "auto"), ("root", 1, "auto"), ("secondary", 5, "sata"),
    ]  # fmt: skip


def test_starting_strategies_start_the_instance_on_create(
    project, operator, subnet, settings, django_capture_on_commit_callbacks
):
    settings.ZOPDAY_HOST = "test-create"  # new instances are placed here, where no worker reads
    queue = BrokerQueue("host.test-create")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            instance = instance_create(
                project=project,
                actor=operator,
                request=instance_request(subnet, run_strategy=RunStrategy.ALWAYS),
            )
        assert instance.power_state == PowerState.STARTING
        assert [sent.task for sent in queue.sent()] == ["instances.machine_start"]
    finally:
        queue.forget()


def test_nic_rows_exist_only_for_valid_requests(project, operator, subnet):
    errors = errors_of(
        project,
        operator,
        instance_request(subnet, nics=[NicRequest(subnet), NicRequest(subnet, mac="zz")]),
    )
    assert errors == {
        "nics-1-mac": [
            "Enter a MAC address as six pairs of hex digits separated by colons, "
            "e.g. 52:54:00:12:34:56."
        ]
    }
    assert not NetworkInterface.objects.exists()


def test_each_disk_has_its_own_boot_order(project, operator, subnet):
    errors = errors_of(
        project, operator, instance_request(subnet, disks=[DiskRequest(size_gb=1, boot_order=1)])
    )
    assert errors == {
        "disks-0-boot_order": [
            "web-1-root already boots at order 1 on web-1: give this disk another (lower boots "
            "first; the root disk is 1)."
        ]
    }


def test_an_instance_holds_six_sata_disks_and_cdrom_drives(project, operator, subnet):
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    disks = [DiskRequest(size_gb=1, bus="sata") for _ in range(6)]
    disks.append(DiskRequest(size_gb=0, role=DiskRole.CDROM, image=iso))
    errors = errors_of(project, operator, instance_request(subnet, disks=disks))
    assert errors == {
        "disks-6-disk": [
            "web-1 has 6 SATA disks and CD-ROM drives, as many as an instance holds: give the "
            "disks virtio, or ask for fewer."
        ]
    }


def test_a_cdrom_drive_is_on_sata(project, operator, subnet):
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    cdrom = DiskRequest(size_gb=0, role=DiskRole.CDROM, image=iso, bus="virtio")
    errors = errors_of(project, operator, instance_request(subnet, disks=[cdrom]))
    assert errors == {"disks-0-bus": ["A CD-ROM drive is on SATA: choose auto or sata."]}
