"""Turn an Instance and its disks and NICs into the backend's MachineSpec."""

import base64
import json

from instances.backends.base import DiskSpec, FirmwareSpec, MachineSpec, NicSpec
from instances.choices import DiskBus, DiskRole, ImageKind, LinkState, OsType
from instances.cloudinit import seed_for
from instances.containerdisks.cache import container_source
from instances.models import Disk, Instance, Project, RegistryCredential, Subnet

ROLE_ORDER: dict[str, int] = {
    DiskRole.ROOT: 0, DiskRole.SECONDARY: 1, DiskRole.CONTAINER: 1, DiskRole.CDROM: 2
}  # fmt: skip


def effective_bus(disk: Disk) -> str:
    """CD-ROM drives are SATA (QEMU has no virtio CD-ROM); for disks `auto` picks virtio for
    Linux images and SATA for the rest (no VirtIO drivers assumed)."""
    if disk.role == DiskRole.CDROM:
        return DiskBus.SATA
    if disk.bus != DiskBus.AUTO:
        return disk.bus
    os_type = disk.image.os_type if disk.image else OsType.LINUX
    return DiskBus.VIRTIO if os_type == OsType.LINUX else DiskBus.SATA


def disk_spec(disk: Disk) -> DiskSpec:
    image = disk.image
    source = None
    reference = ""
    if image is not None and image.kind in (ImageKind.QCOW2, ImageKind.ISO):
        source = image.file
    pull_login = ""
    if image is not None and image.kind == ImageKind.CONTAINER:  # a container or copied disk
        source, reference = container_source(image.reference, disk.digest)
        pull_login = docker_config(disk.project, image.reference)
    claim = image.reference if image is not None and image.kind == ImageKind.PVC else ""
    return DiskSpec(
        name=disk.device_name,
        role=disk.role,
        bus=effective_bus(disk),
        size_gb=disk.size_gb,
        source=source,
        boot_order=disk.boot_order,
        serial=disk.name[:20],
        reference=reference,
        pull_login=pull_login,
        claim=claim,
    )


def docker_config(project: Project, reference: str) -> str:
    """The project's login to the reference's registry as a .dockerconfigjson; "" for none."""
    registry = reference.split("/", 1)[0]
    login = RegistryCredential.objects.filter(project=project, registry=registry).first()
    if login is None:
        return ""
    token = base64.b64encode(f"{login.username}:{login.password}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": token}}})


def _kernel_file(disks: tuple[DiskSpec, ...], nics: tuple[NicSpec, ...]) -> str:
    """The demo image's small cloud kernel has no SATA/AHCI or e1000 drivers; the generic
    kernel beside it has them all."""
    legacy = any(d.bus == DiskBus.SATA for d in disks) or any(n.model == "e1000" for n in nics)
    return "vmlinuz-generic" if legacy else "vmlinuz"


def machine_spec(instance: Instance) -> MachineSpec:
    disks = sorted(
        instance.disks.select_related("image").all(),
        key=lambda d: (ROLE_ORDER.get(d.role, 9), d.boot_order or 99, d.pk),
    )
    kernel_image = next(
        (
            d.image
            for d in disks
            if d.role == DiskRole.ROOT and d.image and d.image.kind == ImageKind.KERNEL
        ),
        None,
    )
    sockets, cores, threads = instance.topology
    disk_specs = tuple(disk_spec(d) for d in disks)
    nic_specs = tuple(
        NicSpec(
            name=nic.name,
            mac=nic.mac,
            model=nic.model,
            link_up=nic.link_desired == LinkState.UP,
            network=nic.subnet.segment,
            gateway=segment_gateway(nic.subnet),
        )
        for nic in instance.nics.select_related("subnet").order_by("index")
    )
    return MachineSpec(
        id=instance.machine_id,
        name=instance.name,
        vcpus=instance.vcpus,
        sockets=sockets,
        cores=cores,
        threads=threads,
        memory_mb=instance.memory_gb * 1024,
        firmware=FirmwareSpec(
            bootloader=instance.bootloader,
            secure_boot=instance.secure_boot,
            persistent_efi=instance.persistent_efi,
            vtpm=instance.vtpm,
        ),
        disks=disk_specs,
        nics=nic_specs,
        seed=seed_for(instance),
        kernel=kernel_image.file / _kernel_file(disk_specs, nic_specs) if kernel_image else None,
        initrd=kernel_image.file / "initrd.img" if kernel_image else None,
        kernel_cmdline="console=ttyS0" if kernel_image else "",
    )


def segment_gateway(subnet: Subnet) -> str:
    """The subnet's IPv4 gateway with its prefix, held by the host side of the segment."""
    network = subnet.network_v4
    if network is None or not subnet.gateway:
        return ""
    return f"{subnet.gateway}/{network.prefixlen}"
