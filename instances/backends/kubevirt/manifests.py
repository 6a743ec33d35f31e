"""A MachineSpec as the objects KubeVirt runs it from: a `kubevirt.io/v1` VirtualMachine whose
disks are CDI DataVolume templates (or container disks), whose interfaces join the project's
subnets through Multus NetworkAttachmentDefinitions, and whose NoCloud seed is a Secret.

Nothing is dropped: a field KubeVirt has no place for is a BackendError naming it."""

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from instances.backends.base import BackendError, DiskSpec, MachineSpec, NicSpec

Body = dict[str, Any]
API_VERSION = "kubevirt.io/v1"
CDI_VERSION = "cdi.kubevirt.io/v1beta1"
MULTUS_VERSION = "k8s.cni.cncf.io/v1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "zopday"}
MACHINE_LABEL = "zopday.io/machine"  # on a VM, its VMI and DataVolumes: the machine id
MEDIUM_LABEL = "zopday.io/cdrom"  # on a CD-ROM's DataVolume: the drive's disk name
POD_NETWORK = "default"  # user-mode networking on QEMU: the pod network, masqueraded
# deploy/kubevirt/rbac.yaml: the console's account, and the role giving it a namespace's Secrets
CONSOLE_ACCOUNT = {"kind": "ServiceAccount", "name": "zopday-console", "namespace": "zopday"}
SECRETS_ROLE = "zopday-console-secrets"


@dataclass(frozen=True)
class Placement:
    """Where and how the machine runs on the cluster."""

    namespace: str
    run_strategy: str  # KubeVirt's runStrategy: Always, Manual, RerunOnFailure, Once, Halted
    zone: str = ""  # topology.kubernetes.io/zone of the nodes it may run on
    kernel_image: str = ""  # an OCI image holding /boot/vmlinuz and /boot/initrd.img


def _disk_source(spec: MachineSpec, disk: DiskSpec, image_url: Callable[[DiskSpec], str]) -> Body:
    """A DataVolume source: a cluster volume to clone (pvc), a container image's disk from its
    registry (by digest, with the project's login), the image's URL (http), or a blank disk."""
    if disk.claim:
        namespace, _, name = disk.claim.partition("/")
        return {"pvc": {"namespace": namespace, "name": name}}
    if disk.reference:
        registry: Body = {"url": f"docker://{disk.reference}"}
        if disk.pull_login:
            registry["secretRef"] = registry_secret_name(spec.id, disk)
        return {"registry": registry}
    url = image_url(disk) if disk.source is not None else ""
    if disk.source is not None and not url:
        raise BackendError(
            f"{disk.name}: its image {disk.source.name} has no address the cluster can import "
            "it from."
        )
    if url.startswith("docker://"):
        return {"registry": {"url": url}}
    if url:
        return {"http": {"url": url}}
    if disk.role == "cdrom":
        raise BackendError(f"{disk.name}: a CD-ROM drive on KubeVirt needs its ISO's URL.")
    return {"blank": {}}


def _device(disk: DiskSpec) -> Body:
    device: Body = {"name": disk.name}
    if disk.role == "cdrom":
        device["cdrom"] = {"bus": "sata", "readonly": True}
    else:
        device["disk"] = {"bus": disk.bus}
    if disk.boot_order is not None:
        device["bootOrder"] = disk.boot_order
    if disk.serial and disk.role != "cdrom":
        device["serial"] = disk.serial
    return device


def data_volume_name(machine_id: str, disk: DiskSpec) -> str:
    """A disk's DataVolume. A CD-ROM's is named for its medium too: CDI imports a DataVolume
    once, so another ISO in the drive is another DataVolume."""
    if disk.role == "cdrom":
        medium = hashlib.sha256(str(disk.source).encode()).hexdigest()[:8]
        return f"{machine_id}-{disk.name}-{medium}"
    return f"{machine_id}-{disk.name}"


def _volumes(
    spec: MachineSpec, image_url: Callable[[DiskSpec], str]
) -> tuple[list[Body], list[Body], list[Body]]:
    """The disks' devices, volumes and DataVolume templates."""
    devices, volumes, templates = [], [], []
    for disk in spec.disks:
        devices.append(_device(disk))
        if disk.role == "container":
            if not disk.reference:
                raise BackendError(f"{disk.name}: a container disk needs its image reference.")
            source: Body = {"image": disk.reference}
            if disk.pull_login:
                source["imagePullSecret"] = pull_secret_name(spec.id, disk)
            volumes.append({"name": disk.name, "containerDisk": source})
            continue
        name = data_volume_name(spec.id, disk)
        size = f"{max(disk.size_gb, 1)}Gi"
        labels = {**MANAGED_BY, MACHINE_LABEL: spec.id}
        if disk.role == "cdrom":
            labels[MEDIUM_LABEL] = disk.name
        templates.append({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "source": _disk_source(spec, disk, image_url),
                "storage": {"resources": {"requests": {"storage": size}}},
            },
        })  # fmt: skip
        volumes.append({"name": disk.name, "dataVolume": {"name": name}})
    return devices, volumes, templates


def _interface(nic: NicSpec) -> Body:
    interface: Body = {"name": nic.name, "macAddress": nic.mac, "model": nic.model}
    interface["bridge" if nic.network else "masquerade"] = {}
    if not nic.link_up:
        interface["state"] = "down"
    return interface


def _networks(spec: MachineSpec, networks: dict[str, str]) -> list[Body]:
    """Each NIC's network: its subnet's NetworkAttachmentDefinition, or the pod network. With
    no pod network, the first Multus network is the VM's default."""
    found = []
    pod = any(not nic.network for nic in spec.nics)
    for index, nic in enumerate(spec.nics):
        if not nic.network:
            found.append({"name": nic.name, "pod": {}})
            continue
        if nic.network not in networks:
            raise BackendError(f"{nic.name}: its subnet has no network on the cluster yet.")
        multus: Body = {"networkName": networks[nic.network]}
        if not pod and index == 0:
            multus["default"] = True
        found.append({"name": nic.name, "multus": multus})
    return found


def _firmware(spec: MachineSpec, placement: Placement) -> tuple[Body, Body]:
    """The domain's firmware and features."""
    firmware: Body = {"serial": spec.id}
    features: Body = {"acpi": {}}
    wanted = spec.firmware
    if wanted.bootloader == "uefi":
        efi: Body = {"secureBoot": wanted.secure_boot}
        if wanted.persistent_efi:
            efi["persistent"] = True
        firmware["bootloader"] = {"efi": efi}
        if wanted.secure_boot:
            features["smm"] = {"enabled": True}  # KubeVirt requires SMM for Secure Boot
    else:
        if wanted.secure_boot or wanted.persistent_efi:
            raise BackendError("Secure Boot and a persistent EFI store need UEFI firmware.")
        firmware["bootloader"] = {"bios": {}}
    if spec.kernel is not None:
        if not placement.kernel_image:
            raise BackendError(
                "This image boots a kernel directly; the cluster needs a kernel image (an OCI "
                "image with /boot/vmlinuz and /boot/initrd.img) set for it."
            )
        firmware["kernelBoot"] = {
            "kernelArgs": spec.kernel_cmdline,
            "container": {
                "image": placement.kernel_image,
                "kernelPath": f"/boot/{spec.kernel.name}",
                "initrdPath": "/boot/initrd.img",
            },
        }
    return firmware, features


def seed_secret_name(machine_id: str) -> str:
    return f"{machine_id}-cloudinit"


def seed_secret(spec: MachineSpec, namespace: str) -> Body | None:
    """The NoCloud user data and network config, in a Secret: user data may hold passwords."""
    if spec.seed is None:
        return None
    data = {"userdata": spec.seed.user_data}
    if spec.seed.network_config:
        data["networkdata"] = spec.seed.network_config
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": seed_secret_name(spec.id),
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "type": "Opaque",
        "stringData": data,
    }


def secrets_binding(namespace: str) -> Body:
    """The RoleBinding giving the console the Secrets of this project namespace (and no other)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": SECRETS_ROLE, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SECRETS_ROLE,
        },
        "subjects": [dict(CONSOLE_ACCOUNT)],
    }  # fmt: skip


def pull_secret_name(machine_id: str, disk: DiskSpec) -> str:
    return f"{machine_id}-{disk.name}-pull"


def registry_secret_name(machine_id: str, disk: DiskSpec) -> str:
    return f"{machine_id}-{disk.name}-registry"


def pull_secrets(spec: MachineSpec, namespace: str) -> list[Body]:
    """The registry logins of its disks from container images: a container disk's as the pull
    Secret KubeVirt's names, a copied disk's as CDI's registry Secret (accessKeyId, secretKey)."""
    secrets = []
    for disk in spec.disks:
        if not disk.pull_login:
            continue
        meta = {"namespace": namespace, "labels": dict(MANAGED_BY)}
        if disk.role == "container":
            secrets.append({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                "metadata": {"name": pull_secret_name(spec.id, disk), **meta},
                "stringData": {".dockerconfigjson": disk.pull_login},
            })  # fmt: skip
            continue
        auths = json.loads(disk.pull_login)["auths"]
        user, _, password = (
            base64.b64decode(next(iter(auths.values()))["auth"]).decode().partition(":")
        )
        secrets.append({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": registry_secret_name(spec.id, disk), **meta},
            "stringData": {"accessKeyId": user, "secretKey": password},
        })  # fmt: skip
    return secrets


def virtual_machine(
    spec: MachineSpec,
    placement: Placement,
    *,
    networks: dict[str, str],
    image_url: Callable[[DiskSpec], str],
) -> Body:
    """The VirtualMachine of `spec`. `networks` maps a subnet's segment to its
    NetworkAttachmentDefinition; `image_url` gives where the cluster fetches a disk's image."""
    devices, volumes, templates = _volumes(spec, image_url)
    firmware, features = _firmware(spec, placement)
    if spec.seed is not None:
        name = seed_secret_name(spec.id)
        devices.append({"name": "cloudinit", "disk": {"bus": "virtio"}})
        nocloud: Body = {"secretRef": {"name": name}}
        if spec.seed.network_config:
            nocloud["networkDataSecretRef"] = {"name": name}
        volumes.append({"name": "cloudinit", "cloudInitNoCloud": nocloud})
    memory = f"{spec.memory_mb}Mi"
    domain: Body = {
        "cpu": {"sockets": spec.sockets, "cores": spec.cores, "threads": spec.threads},
        "memory": {"guest": memory},
        "resources": {"requests": {"memory": memory}},
        "firmware": firmware,
        "features": features,
        "devices": {
            "disks": devices,
            "interfaces": [_interface(nic) for nic in spec.nics],
            "autoattachSerialConsole": True,
            "autoattachGraphicsDevice": True,
        },
    }
    if spec.firmware.vtpm:
        domain["devices"]["tpm"] = {"persistent": True}
    template_spec: Body = {
        "domain": domain,
        "networks": _networks(spec, networks),
        "volumes": volumes,
    }
    if placement.zone:
        template_spec["nodeSelector"] = {"topology.kubernetes.io/zone": placement.zone}
    labels = {**MANAGED_BY, MACHINE_LABEL: spec.id}
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachine",
        "metadata": {
            "name": spec.id,
            "namespace": placement.namespace,
            "labels": labels,
            "annotations": {"zopday.io/instance-name": spec.name},
        },
        "spec": {
            "runStrategy": placement.run_strategy,
            "dataVolumeTemplates": templates,
            "template": {"metadata": {"labels": labels}, "spec": template_spec},
        },
    }


def network_attachment(segment: str, namespace: str) -> Body:
    """A subnet's L2 segment as a Multus network: a Linux bridge per segment on each node;
    the guests' addresses come from the console's IPAM through cloud-init, none from the CNI."""
    config = {
        "cniVersion": "0.3.1",
        "name": segment,
        "type": "bridge",
        "bridge": f"zop-{segment}"[:15],
        "ipam": {},
    }
    return {
        "apiVersion": MULTUS_VERSION,
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": segment, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"config": json.dumps(config, sort_keys=True)},
    }
