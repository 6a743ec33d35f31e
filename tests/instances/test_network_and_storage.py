import pytest
from django.core.exceptions import ValidationError

from instances.choices import DiskRole, ImageKind, LinkState, PowerState, Role
from instances.errors import ActionRefused
from instances.models import AuditEvent, Disk, ElasticIP, Instance, NetworkInterface
from instances.services import ipam, network, snapshots, storage
from instances.services.instances import DiskRequest, instance_create
from tests.factories import ImageFactory, MembershipFactory, SubnetFactory, instance_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def instance(project, operator, subnet):
    return instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, disks=[DiskRequest(size_gb=2)]),
    )


def running(instance):
    instance.power_state = PowerState.RUNNING
    instance.save(update_fields=["power_state"])
    return instance


def test_taking_the_primary_link_down_needs_confirmation(instance, operator):
    eth0 = instance.nics.get()
    with pytest.raises(ActionRefused, match="eth0 is the primary interface"):
        network.nic_set_link(nic=eth0, actor=operator, up=False)
    network.nic_set_link(nic=eth0, actor=operator, up=False, confirm_primary=True)
    eth0.refresh_from_db()
    assert eth0.link_desired == LinkState.DOWN


def test_a_second_nic_gets_the_next_index_and_address(instance, operator, subnet):
    nic = network.nic_add(instance=instance, actor=operator, subnet=subnet, mac="52:54:00:00:00:09")
    assert (nic.name, nic.ipv4, nic.mac, nic.mac_static) == (
        "eth1",
        "10.20.0.3",
        "52:54:00:00:00:09",
        True,
    )
    network.nic_set_link(nic=nic, actor=operator, up=False)  # not primary: no confirmation
    nic.refresh_from_db()
    assert nic.link_desired == LinkState.DOWN


def test_a_nic_is_removed_only_when_stopped_and_never_the_primary(instance, operator, subnet):
    eth1 = network.nic_add(instance=instance, actor=operator, subnet=subnet)
    with pytest.raises(ActionRefused) as refused:
        network.nic_remove(nic=instance.nics.get(index=0), actor=operator)
    assert str(refused.value) == (
        "eth0 is the primary interface: an instance keeps it. Take its link down, or change its "
        "subnet by creating the instance anew."
    )
    running(instance)
    with pytest.raises(ActionRefused, match="Stop the instance before removing an interface."):
        network.nic_remove(nic=eth1, actor=operator)
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    network.nic_remove(nic=NetworkInterface.objects.get(pk=eth1.pk), actor=operator)
    assert [nic.name for nic in instance.nics.all()] == ["eth0"]


def test_a_viewer_cannot_change_links(instance, viewer):
    with pytest.raises(ActionRefused, match="Needs the operator role."):
        network.nic_set_link(nic=instance.nics.get(), actor=viewer, up=True)


def test_an_elastic_ip_is_allocated_associated_and_released(instance, project, operator):
    eip = network.eip_allocate(project=project, actor=operator)
    assert eip.address == "198.51.100.1"
    network.eip_associate(eip=eip, nic=instance.nics.get(), actor=operator)
    with pytest.raises(ValidationError, match="already has an Elastic IP"):
        network.eip_associate(
            eip=network.eip_allocate(project=project, actor=operator),
            nic=instance.nics.get(),
            actor=operator,
        )
    network.eip_release(eip=eip, actor=operator)  # first disassociates
    eip.refresh_from_db()
    assert eip.nic is None
    network.eip_release(eip=eip, actor=operator)  # then releases
    assert not ElasticIP.objects.filter(address="198.51.100.1").exists()


def test_a_persistent_disk_is_detached_only_from_a_stopped_instance(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    running(instance)
    with pytest.raises(ActionRefused, match="Stop the instance before detaching a persistent disk"):
        storage.disk_detach(disk=disk, actor=operator)
    instance.power_state = PowerState.STOPPED
    instance.save()
    storage.disk_detach(disk=disk, actor=operator)
    disk.refresh_from_db()
    assert disk.instance is None


@pytest.mark.parametrize("state", [PowerState.STOPPED, PowerState.RUNNING])
def test_the_root_disk_is_never_detached(instance, operator, state):
    Instance.objects.filter(pk=instance.pk).update(power_state=state)
    instance.refresh_from_db()
    root = instance.disks.get(role=DiskRole.ROOT)
    with pytest.raises(ActionRefused) as refused:
        storage.disk_detach(disk=root, actor=operator)
    assert refused.value.message == (
        "web-1-root is web-1's root disk, which stays with it: snapshot it, or delete the instance."
    )
    root.refresh_from_db()
    assert root.instance == instance


def test_a_disk_is_not_detached_from_an_instance_started_meanwhile(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    instance.power_state = PowerState.STOPPED
    instance.save(update_fields=["power_state"])
    seen = Disk.objects.select_related("instance").get(pk=disk.pk)  # as the page read it: off
    running(instance)
    with pytest.raises(ActionRefused, match="Stop the instance before detaching a persistent disk"):
        storage.disk_detach(disk=seen, actor=operator)
    assert Disk.objects.get(pk=disk.pk).instance == instance


def test_a_disk_detached_meanwhile_is_not_detached_again(instance, project, operator, subnet):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    instance.power_state = PowerState.STOPPED
    instance.save(update_fields=["power_state"])
    seen = Disk.objects.select_related("instance").get(pk=disk.pk)
    storage.disk_detach(disk=disk, actor=operator)
    other = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="web-2")
    )
    storage.disk_attach(disk=disk, instance=other, actor=operator)
    with pytest.raises(ActionRefused, match="is no longer attached to web-1"):
        storage.disk_detach(disk=seen, actor=operator)
    assert Disk.objects.get(pk=disk.pk).instance == other


def test_a_disk_of_another_zone_cannot_be_attached(instance, project, operator):
    far = storage.disk_create(
        project=project, actor=operator, name="far", zone="local-1b", size_gb=1
    )
    with pytest.raises(ValidationError) as caught:
        storage.disk_attach(disk=far, instance=instance, actor=operator)
    assert caught.value.message_dict["zone"] == [
        "The disk is in local-1b but the instance is in local-1a; a disk must be in its instance's zone."
    ]


def test_an_attached_disk_cannot_be_attached_elsewhere(instance, project, operator, subnet):
    other = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="web-2")
    )
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    with pytest.raises(ValidationError, match="is attached to web-1; detach it first"):
        storage.disk_attach(disk=disk, instance=other, actor=operator)


def test_a_free_disk_taken_meanwhile_is_not_attached_twice(instance, project, operator, subnet):
    other = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="web-2")
    )
    free = storage.disk_create(
        project=project, actor=operator, name="data", zone="local-1a", size_gb=1
    )
    seen_free = Disk.objects.get(pk=free.pk)  # as a second user's page read it
    storage.disk_attach(disk=free, instance=instance, actor=operator)
    events = AuditEvent.objects.count()
    with pytest.raises(ValidationError) as caught:
        storage.disk_attach(disk=seen_free, instance=other, actor=operator)
    assert caught.value.message_dict["disk"] == ["data is attached to web-1; detach it first."]
    assert Disk.objects.get(pk=free.pk).instance == instance
    assert AuditEvent.objects.count() == events  # nothing recorded for the refused attach


def test_disks_only_grow(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    with pytest.raises(ValidationError) as caught:
        storage.disk_resize(disk=disk, actor=operator, size_gb=1)
    assert caught.value.message_dict["size_gb"] == [
        "Disks can only grow: enter more than the current 2 GB."
    ]
    storage.disk_resize(disk=disk, actor=operator, size_gb=4)
    disk.refresh_from_db()
    assert disk.size_gb == 4


def test_a_snapshot_name_is_a_label_and_unique(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    with pytest.raises(ValidationError, match="lowercase letters"):
        snapshots.disk_snapshot(disk=disk, actor=operator, name="Before Upgrade")
    snapshots.disk_snapshot(disk=disk, actor=operator, name="before-upgrade")
    with pytest.raises(ValidationError, match="already has a snapshot called before-upgrade"):
        snapshots.disk_snapshot(disk=disk, actor=operator, name="before-upgrade")


def test_a_cdrom_takes_isos_only(instance, project, operator):
    drive = storage.disk_create(
        project=project, actor=operator, name="cd", zone="local-1a", size_gb=0, role=DiskRole.CDROM
    )
    storage.disk_attach(disk=drive, instance=instance, actor=operator)
    with pytest.raises(ValidationError, match="is not an ISO image"):
        storage.cdrom_insert(disk=drive, actor=operator, image=ImageFactory(kind=ImageKind.QCOW2))
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    storage.cdrom_insert(disk=drive, actor=operator, image=iso)
    drive.refresh_from_db()
    assert drive.image == iso
    storage.cdrom_eject(disk=drive, actor=operator)
    drive.refresh_from_db()
    assert drive.image is None


@pytest.mark.parametrize(("bus", "role"), [("sata", DiskRole.SECONDARY), ("auto", DiskRole.CDROM)])
def test_only_virtio_disks_are_attached_to_a_running_instance(
    instance, project, operator, bus, role
):
    disk = storage.disk_create(
        project=project, actor=operator, name="legacy", zone="local-1a", size_gb=1, bus=bus,
        role=role,
    )  # fmt: skip
    with pytest.raises(ActionRefused) as caught:
        storage.disk_attach(disk=disk, instance=running(instance), actor=operator)
    assert caught.value.message == (
        "Only virtio disks are plugged into a running instance: stop web-1 to attach legacy "
        "(SATA or CD-ROM)."
    )
    assert Disk.objects.get(pk=disk.pk).instance is None
    instance.power_state = PowerState.STOPPED
    instance.save(update_fields=["power_state"])
    storage.disk_attach(disk=disk, instance=instance, actor=operator)
    assert Disk.objects.get(pk=disk.pk).instance == instance


def refusal(call, **kwargs) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call(**kwargs)
    return caught.value.message_dict


def test_a_disk_of_another_project_cannot_be_attached(instance, operator, other_project):
    foreign = Disk.objects.create(project=other_project, zone="local-1a", name="theirs", size_gb=1)
    assert refusal(storage.disk_attach, disk=foreign, instance=instance, actor=operator) == {
        "disk": ["Choose a disk of this project."]
    }
    assert Disk.objects.get(pk=foreign.pk).instance is None


def test_a_disk_deleted_meanwhile_is_not_attached(instance, project, operator):
    free = storage.disk_create(
        project=project, actor=operator, name="gone", zone="local-1a", size_gb=1
    )
    Disk.objects.filter(pk=free.pk).delete()
    with pytest.raises(ActionRefused) as caught:
        storage.disk_attach(disk=free, instance=instance, actor=operator)
    assert caught.value.message == "gone has been deleted."


def test_an_instance_deleted_meanwhile_takes_no_disk(instance, project, operator):
    free = storage.disk_create(
        project=project, actor=operator, name="data", zone="local-1a", size_gb=1
    )
    Instance.objects.filter(pk=instance.pk).delete()
    with pytest.raises(ActionRefused) as caught:
        storage.disk_attach(disk=free, instance=instance, actor=operator)
    assert caught.value.message == "web-1 has been deleted."
    assert Disk.objects.get(pk=free.pk).instance is None


def test_a_free_disk_cannot_be_detached(project, operator):
    free = storage.disk_create(
        project=project, actor=operator, name="data", zone="local-1a", size_gb=1
    )
    with pytest.raises(ActionRefused) as caught:
        storage.disk_detach(disk=free, actor=operator)
    assert caught.value.message == "data is not attached."


def test_a_free_disk_is_deleted_with_its_file_on_the_host_that_holds_it(
    instance, operator, viewer, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    data = storage.disk_add(instance=instance, actor=operator, name="data", size_gb=1)
    assert (data.backend, data.host) == (instance.backend, instance.host)
    with pytest.raises(ActionRefused) as attached:
        storage.disk_delete(disk=data, actor=operator)
    assert attached.value.message == "data is attached to web-1: detach it first."
    queue.sent()  # the attach's own messages, if any

    storage.disk_detach(disk=data, actor=operator)
    with pytest.raises(ActionRefused, match="Needs the operator role"):
        storage.disk_delete(disk=data, actor=viewer)
    with django_capture_on_commit_callbacks(execute=True):
        storage.disk_delete(disk=data, actor=operator)
    assert not Disk.objects.filter(pk=data.pk).exists()
    assert [(sent.task, sent.args) for sent in queue.sent()] == [
        ("instances.disk_file_delete", (instance.backend, f"disk-{data.pk}"))
    ]
    assert AuditEvent.objects.filter(action="disk.delete", target_id=str(data.pk)).exists()


def test_the_file_task_removes_the_disk_from_the_backends_store(settings):
    from instances.backends import backend_named
    from instances.backends.qemu.run_folder import disk_store
    from instances.tasks import disk_file_delete

    backend = backend_named("qemu")
    store = disk_store(backend.root)
    store.mkdir(parents=True, exist_ok=True)
    (store / "disk-9999.qcow2").write_bytes(b"QFI")
    disk_file_delete("qemu", "disk-9999")
    assert not (store / "disk-9999.qcow2").exists()


def test_an_instance_holds_as_many_virtio_disks_and_interfaces_as_its_machine_does(
    project, operator, subnet
):
    from instances.backends.base import MAX_PCI_DEVICES

    def request(name: str, disks: int) -> object:
        return instance_request(
            subnet, name=name, disks=[DiskRequest(size_gb=1, bus="virtio")] * disks
        )

    with pytest.raises(ValidationError) as refused:  # root + 22 + eth0 = 24
        instance_create(
            project=project, actor=operator, request=request("big", MAX_PCI_DEVICES - 1)
        )
    assert refused.value.message_dict == {
        "nics": [
            f"big has {MAX_PCI_DEVICES} virtio disks and interfaces together, as many as its "
            "machine holds: ask for fewer, or give some disks SATA."
        ]
    }
    assert not Instance.objects.filter(name="big").exists()
    full = instance_create(  # root + 21 + eth0 = 23
        project=project, actor=operator, request=request("full", MAX_PCI_DEVICES - 2)
    )
    with pytest.raises(ActionRefused) as nic:
        network.nic_add(instance=full, actor=operator, subnet=subnet)
    assert nic.value.message.endswith("as many as its machine holds: remove one first.")
    with pytest.raises(ValidationError) as disk:
        storage.disk_add(instance=full, actor=operator, name="one-more", size_gb=1, bus="virtio")
    assert disk.value.message_dict["disk"][0].endswith("holds: detach one first.")
    storage.disk_add(instance=full, actor=operator, name="on-sata", size_gb=1, bus="sata")


def test_a_name_taken_in_the_project_is_said_at_the_name_field(project, operator, subnet):
    from instances.services import keys

    instance_create(project=project, actor=operator, request=instance_request(subnet))
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi a@b"
    keys.ssh_key_add(project=project, actor=operator, name="desk", public_key=key)
    taken = {
        "An instance named web-1 already exists in this project: choose another name.": lambda: (
            instance_create(project=project, actor=operator, request=instance_request(subnet))
        ),
        "A disk named web-1-root already exists in this project: choose another name.": lambda: (
            storage.disk_create(
                project=project, actor=operator, name="web-1-root", zone="local-1a", size_gb=1
            )
        ),
        f"A subnet named {subnet.name} already exists in this project: choose another name.": (
            lambda: network.subnet_create(
                project=project,
                actor=operator,
                name=subnet.name,
                zone=subnet.zone,
                cidr_v4="10.99.0.0/24",
            )
        ),
        "A key named desk already exists in this project: choose another name.": lambda: (
            keys.ssh_key_add(project=project, actor=operator, name="desk", public_key=key)
        ),
    }
    for message, create in taken.items():
        with pytest.raises(ValidationError) as refused:
            create()
        assert refused.value.message_dict["name"] == [message]
        assert "__all__" not in refused.value.message_dict


def test_an_instance_of_the_longest_name_gets_its_disks_named_after_it(project, operator, subnet):
    name = "a" * 63
    request = instance_request(subnet, name=name, disks=[DiskRequest(size_gb=1)] * 12)
    instance = instance_create(project=project, actor=operator, request=request)
    names = set(instance.disks.values_list("name", flat=True))
    assert f"{name}-root" in names and f"{name}-disk12" in names


def test_only_root_and_secondary_disks_are_resized(instance, project, operator):
    drive = storage.disk_create(
        project=project, actor=operator, name="cd", zone="local-1a", size_gb=0, role=DiskRole.CDROM
    )
    assert refusal(storage.disk_resize, disk=drive, actor=operator, size_gb=2) == {
        "size_gb": ["Only root and secondary disks can be resized."]
    }


def test_a_disk_grows_to_16384_gb_at_most(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    assert refusal(storage.disk_resize, disk=disk, actor=operator, size_gb=16385) == {
        "size_gb": ["Disk size must be between 1 and 16384 GB."]
    }
    assert Disk.objects.get(pk=disk.pk).size_gb == 2


def test_media_go_into_cdrom_drives_only(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    iso = ImageFactory(kind=ImageKind.ISO, name="rescue")
    assert refusal(storage.cdrom_insert, disk=disk, actor=operator, image=iso) == {
        "disk": [f"{disk.name} is not a CD-ROM drive."]
    }


def test_a_cdrom_takes_only_isos_of_its_project_or_shared_ones(project, operator, other_project):
    drive = storage.disk_create(
        project=project, actor=operator, name="cd", zone="local-1a", size_gb=0, role=DiskRole.CDROM
    )
    theirs = ImageFactory(kind=ImageKind.ISO, name="theirs", project=other_project)
    assert refusal(storage.cdrom_insert, disk=drive, actor=operator, image=theirs) == {
        "image": ["Choose an ISO of this project or a shared one."]
    }
    shared = ImageFactory(kind=ImageKind.ISO, name="rescue")
    storage.cdrom_insert(disk=drive, actor=operator, image=shared)
    assert Disk.objects.get(pk=drive.pk).image == shared


def test_a_nic_model_is_virtio_or_e1000(instance, operator, subnet):
    assert refusal(
        network.nic_add, instance=instance, actor=operator, subnet=subnet, model="rtl8139"
    ) == {"model": ["Choose virtio or e1000."]}
    assert instance.nics.count() == 1


def test_an_exhausted_pool_allocates_nothing(project, operator, settings):
    settings.ZOPDAY_EIP_POOL = "198.51.100.0/30"  # two addresses
    network.eip_allocate(project=project, actor=operator)
    network.eip_allocate(project=project, actor=operator)
    with pytest.raises(ActionRefused) as caught:
        network.eip_allocate(project=project, actor=operator)
    assert caught.value.message == (
        "The Elastic IP pool 198.51.100.0/30 is exhausted; release an address first."
    )
    assert ElasticIP.objects.count() == 2


def test_an_elastic_ip_routes_to_a_nic_of_its_project_only(instance, operator, other_project):
    theirs = ElasticIP.objects.create(project=other_project, address="198.51.100.9")
    MembershipFactory(project=other_project, user=operator, role=Role.OPERATOR)
    assert refusal(network.eip_associate, eip=theirs, nic=instance.nics.get(), actor=operator) == {
        "nic": ["Choose an interface of this project."]
    }
    assert ElasticIP.objects.get(pk=theirs.pk).nic is None


def test_an_elastic_ip_needs_a_private_ipv4_address(project, operator):
    v6 = SubnetFactory(project=project, name="v6only", cidr_v4="", cidr_v6="fd00:20::/64")
    instance = instance_create(
        project=project, actor=operator, request=instance_request(v6, name="v6-1")
    )
    eip = network.eip_allocate(project=project, actor=operator)
    assert refusal(network.eip_associate, eip=eip, nic=instance.nics.get(), actor=operator) == {
        "nic": ["eth0 of v6-1 has no private IPv4 address to route to."]
    }


def test_a_static_address_has_no_scope(instance, operator, project):
    v6 = SubnetFactory(project=project, name="v6only", cidr_v4="", cidr_v6="fd00:20::/64")
    assert refusal(
        network.nic_add, instance=instance, actor=operator, subnet=v6, ipv6="fd00:20::5%eth0"
    ) == {"ipv6": ["Give fd00:20::5%eth0 without a %scope: it is the guest's address."]}


def test_a_full_subnet_says_so(instance, operator, project):
    tiny = SubnetFactory(project=project, name="tiny", cidr_v4="10.30.0.0/30", gateway="10.30.0.1")
    network.nic_add(instance=instance, actor=operator, subnet=tiny)  # takes 10.30.0.2, the last
    assert refusal(network.nic_add, instance=instance, actor=operator, subnet=tiny) == {
        "subnet": ["Subnet tiny has no free IPv4 address."]
    }
    assert instance.nics.count() == 2


def test_an_address_leased_meanwhile_is_refused_at_its_field(instance):
    eth0 = instance.nics.get()
    with pytest.raises(ValidationError) as caught:
        ipam.lease(eth0, eth0.ipv4, "ipv4")  # a second request that checked before this lease
    assert caught.value.message_dict == {"ipv4": [f"{eth0.ipv4} was just leased by another NIC."]}


def test_cdrom_drives_have_no_snapshots(instance, project, operator):
    drive = storage.disk_create(
        project=project, actor=operator, name="cd", zone="local-1a", size_gb=0, role=DiskRole.CDROM
    )
    storage.disk_attach(disk=drive, instance=instance, actor=operator)
    assert refusal(snapshots.disk_snapshot, disk=drive, actor=operator, name="first") == {
        "disk": ["Only root and secondary disks have snapshots."]
    }


def test_of_two_resizes_at_once_the_smaller_does_not_undo_the_larger(instance, operator):
    disk = instance.disks.get(role=DiskRole.SECONDARY)
    seen = Disk.objects.get(pk=disk.pk)  # as a second user's page read it: 2 GB
    storage.disk_resize(disk=disk, actor=operator, size_gb=8)
    assert refusal(storage.disk_resize, disk=seen, actor=operator, size_gb=4) == {
        "size_gb": [
            "web-1-disk1 was just resized to 8 GB by another request; enter more than that to "
            "grow it further."
        ]
    }
    assert Disk.objects.get(pk=disk.pk).size_gb == 8


def test_an_attached_disk_takes_a_free_boot_order(instance, project, operator):
    disk = storage.disk_create(
        project=project, actor=operator, name="boot2", zone="local-1a", size_gb=1
    )
    Disk.objects.filter(pk=disk.pk).update(boot_order=1)
    disk.refresh_from_db()
    assert refusal(storage.disk_attach, disk=disk, instance=instance, actor=operator) == {
        "boot_order": ["web-1-root already boots at order 1 on web-1: detach web-1-root first."]
    }
    assert Disk.objects.get(pk=disk.pk).instance is None


def test_a_running_instance_takes_three_disks_until_its_next_start(instance, project, operator):
    running(instance)
    for number in range(3):
        disk = storage.disk_create(
            project=project, actor=operator, name=f"hot{number}", zone="local-1a", size_gb=1,
            bus="virtio",
        )  # fmt: skip
        storage.disk_attach(disk=disk, instance=instance, actor=operator)
    fourth = storage.disk_create(
        project=project, actor=operator, name="hot3", zone="local-1a", size_gb=1, bus="virtio"
    )
    with pytest.raises(ActionRefused) as caught:
        storage.disk_attach(disk=fourth, instance=instance, actor=operator)
    assert caught.value.message == (
        "web-1 took 3 disks while running, as many as it can until its next start: stop it to "
        "attach hot3."
    )
    assert Disk.objects.get(pk=fourth.pk).instance is None
    assert Instance.objects.get(pk=instance.pk).hotplugged_disks == 3


def test_a_free_disk_is_attached_only_to_an_instance_on_the_host_of_its_file(
    instance, project, operator
):
    free = storage.disk_create(
        project=project, actor=operator, name="data", zone="local-1a", size_gb=1
    )
    Disk.objects.filter(pk=free.pk).update(backend=instance.backend, host="far-away")
    free.refresh_from_db()
    assert refusal(storage.disk_attach, disk=free, instance=instance, actor=operator) == {
        "disk": [
            f"data's file is on host far-away and web-1 runs on {instance.host}: attach it to an "
            "instance on far-away."
        ]
    }
    assert Disk.objects.get(pk=free.pk).instance is None
    Disk.objects.filter(pk=free.pk).update(host=instance.host)  # on the instance's own host
    free.refresh_from_db()
    storage.disk_attach(disk=free, instance=instance, actor=operator)
    assert Disk.objects.get(pk=free.pk).instance == instance
