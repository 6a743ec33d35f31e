"""A `kubevirt.io/v1` VirtualMachine read as an instance spec (the manifest's InstanceSpec shape),
field by field, the backend's mapping (backends.kubevirt.manifests) read backwards.

Each field read is marked on the document's Fields; a value the console has no setting for is a
problem at its line. The NoCloud Secret and NetworkAttachmentDefinitions come as Companions.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from instances.api.lookups import images_of
from instances.backends.kubevirt.manifests import MANAGED_BY
from instances.choices import DiskBus, NicModel, RunStrategy, UserDataMode
from instances.cloudinit import user_data
from instances.manifests.errors import Problem
from instances.manifests.network_config import static_addresses
from instances.manifests.vm_export import IMAGE, REDACTED_MARK, SUBNET, USER_DATA
from instances.manifests.vm_fields import Fields, Path
from instances.models import Project

ZONE_LABEL = "topology.kubernetes.io/zone"
DOMAIN = ("spec", "template", "spec", "domain")
DEVICES = (*DOMAIN, "devices")
SIZE = re.compile(r"^(\d+)(Mi|Gi|Ti)$")
UNITS = {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
BUSES = (DiskBus.VIRTIO, DiskBus.SATA)


@dataclass
class Companions:
    """The stream's Secrets and NetworkAttachmentDefinitions by name, and those a VM used."""

    secrets: dict[str, Fields] = field(default_factory=dict)
    networks: dict[str, Fields] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)

    def secret(self, name: str) -> Fields | None:
        found = self.secrets.get(name)
        if found is not None:
            self.used.add(id(found))
        return found

    def network(self, name: str) -> Fields | None:
        found = self.networks.get(name.rsplit("/", 1)[-1])
        if found is not None:
            self.used.add(id(found))
        return found


def mebibytes(value: object) -> int | None:
    match = SIZE.match(str(value))
    return int(match[1]) * UNITS[match[2]] if match else None


class VmReader:
    """Reads one VirtualMachine of `project` into `spec`, collecting `problems`."""

    def __init__(self, vm: Fields, project: Project, name: str, companions: Companions) -> None:
        self.vm, self.project, self.name, self.companions = vm, project, name, companions
        self.existing = project.instances.filter(name=name).first()
        self.problems: list[Problem] = []
        self.spec: dict[str, Any] = {}
        self.addresses: dict[str, dict[str, str]] = {}
        self.volumes: dict[Any, int] = {}
        self.templates: dict[Any, int] = {}

    def problem(self, path: Path, message: str) -> None:
        self.problems.append(self.vm.problem(path, message))

    def expect(self, path: Path, allowed: tuple[object, ...], why: str) -> None:
        """A field the mapping writes with a fixed value: read, and refused if it differs."""
        if self.vm.has(*path) and self.vm.get(*path) not in allowed:
            self.problem(path, why)

    def read(self) -> dict[str, Any]:
        vm = self.vm
        spec = self.spec
        strategy = vm.get("spec", "runStrategy")
        if vm.has("spec", "running"):
            strategy = RunStrategy.ALWAYS if vm.get("spec", "running") else RunStrategy.HALTED
        if strategy is not None:
            spec["run_strategy"] = strategy
        for labels in (("metadata", "labels"), ("spec", "template", "metadata", "labels")):
            for key, value in MANAGED_BY.items():
                self.expect((*labels, key), (value,), "Only the console's own label goes here.")
        zone = vm.get("spec", "template", "spec", "nodeSelector", ZONE_LABEL)
        if zone is None:
            self.problem(("spec", "template", "spec"), f"Give nodeSelector {ZONE_LABEL}: the zone.")
        else:
            spec["zone"] = zone
        self.read_domain()
        self.read_disks()
        self.read_nics()
        return spec

    def count(self, path: Path) -> int:
        value = self.vm.get(*path, default=1)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        self.problem(path, "Give a whole number of at least 1.")
        return 1

    def read_domain(self) -> None:
        vm, spec = self.vm, self.spec
        topology = tuple(
            self.count((*DOMAIN, "cpu", part)) for part in ("sockets", "cores", "threads")
        )
        spec["vcpus"] = topology[0] * topology[1] * topology[2]
        topology_fields: tuple[int | None, ...]
        same = self.existing is not None and self.existing.topology == topology
        if same and self.existing is not None:
            topology_fields = (self.existing.sockets, self.existing.cores, self.existing.threads)
        elif topology[1:] == (1, 1):
            topology_fields = (None, None, None)
        else:
            topology_fields = topology
        spec.update(zip(("sockets", "cores", "threads"), topology_fields, strict=True))
        guest = vm.get(*DOMAIN, "memory", "guest")
        size = mebibytes(guest)
        if size is None or size % 1024:
            self.problem((*DOMAIN, "memory", "guest"), "Give the guest memory in whole Gi.")
        else:
            spec["memory_gb"] = size // 1024
        requests = (*DOMAIN, "resources", "requests", "memory")
        self.expect(requests, (guest,), "The memory request is the guest memory.")
        firmware = (*DOMAIN, "firmware")
        self.expect((*firmware, "serial"), (self.vm.get("metadata", "name"), self.name),
                    "The firmware serial is the VirtualMachine's name.")  # fmt: skip
        if vm.has(*firmware, "bootloader", "efi"):
            spec["bootloader"] = "uefi"
            spec["secure_boot"] = bool(
                vm.get(*firmware, "bootloader", "efi", "secureBoot", default=True)
            )
            spec["persistent_efi"] = bool(
                vm.get(*firmware, "bootloader", "efi", "persistent", default=False)
            )
        else:
            vm.get(*firmware, "bootloader", "bios")
        self.expect((*DOMAIN, "features", "smm", "enabled"), (spec.get("secure_boot", False),),
                    "SMM is on exactly when Secure Boot is.")  # fmt: skip
        self.expect((*DOMAIN, "features", "acpi"), ({},), "ACPI takes no settings here.")
        if vm.has(*DEVICES, "tpm"):
            spec["vtpm"] = True
            self.expect((*DEVICES, "tpm", "persistent"), (True,), "The console's vTPM persists.")
        for switch in ("autoattachSerialConsole", "autoattachGraphicsDevice"):
            self.expect((*DEVICES, switch), (True,), "The console always has its consoles.")
        if vm.has(*firmware, "kernelBoot"):
            boot = (*firmware, "kernelBoot")
            self.expect(
                (*boot, "kernelArgs"),
                ("console=ttyS0",),
                "The kernel's arguments are console=ttyS0.",
            )
            self.expect(
                (*boot, "container", "initrdPath"),
                ("/boot/initrd.img",),
                "The initrd is /boot/initrd.img.",
            )
            kernels = ("/boot/vmlinuz", "/boot/vmlinuz-generic")
            self.expect((*boot, "container", "kernelPath"), kernels, "The kernel is /boot/vmlinuz.")
            vm.get(*boot, "container", "image")  # the cluster's kernel image

    # Disks: the first disk is the root disk

    def _bus(self, path: Path) -> str:
        bus = self.vm.get(*path, "bus", default=DiskBus.AUTO)
        if bus != DiskBus.AUTO and bus not in BUSES:
            self.problem((*path, "bus"), "Choose the bus virtio or sata, or leave it out (auto).")
        return str(bus)

    def _image(self, path: Path, reference: str) -> str | int | None:
        """The console image a disk's source names by its reference: a container image's, or a
        cluster volume's namespace/name."""
        matches = list(
            images_of(self.project).filter(reference=reference).values_list("pk", flat=True)[:1]
        )
        if not matches:
            self.problem(
                path, f"No image of project {self.project.slug} has the reference {reference}."
            )
            return None
        return matches[0]

    def read_disks(self) -> None:
        vm = self.vm
        volumes = {
            volume.get("name"): index
            for index, volume in enumerate(vm.get(*DOMAIN[:-1], "volumes", default=[]) or [])
        }
        listed = vm.get("spec", "dataVolumeTemplates", default=[]) or []
        templates = {item.get("metadata", {}).get("name"): n for n, item in enumerate(listed)}
        self.volumes, self.templates = volumes, templates
        disks: list[dict[str, Any]] = []
        root_seen = False
        for index, _ in enumerate(vm.get(*DEVICES, "disks", default=[]) or []):
            path = (*DEVICES, "disks", index)
            name = vm.get(*path, "name")
            if name not in volumes:
                self.problem((*path, "name"), f"No volume is named {name}.")
                continue
            volume = (*DOMAIN[:-1], "volumes", volumes[name])
            vm.get(*volume, "name")
            if vm.has(*volume, "cloudInitNoCloud"):
                vm.get(*path, "disk")
                self.read_cloud_init((*volume, "cloudInitNoCloud"))
                continue
            disk = self.read_disk(path, volume, name)
            if disk is None:
                continue
            if not root_seen and disk["role"] != "cdrom":
                root_seen = True
                self.root(path, disk)
            else:
                disks.append(disk)
        if not root_seen:
            self.problem((*DEVICES, "disks"), "Give a root disk: the first disk.")
        self.spec["disks"] = disks
        if "user_data_mode" not in self.spec:  # no cloud-init volume
            self.spec["user_data_mode"] = UserDataMode.DEFAULT

    def root(self, path: Path, disk: dict[str, Any]) -> None:
        if disk["role"] == "container":
            self.problem(path, "The root disk is a DataVolume; a container disk comes after it.")
        self.expect((*path, "bootOrder"), (1,), "The root disk boots first: bootOrder 1.")
        self.spec.update(
            root_image=disk.get("image"), root_size_gb=disk.get("size_gb", 1), root_bus=disk["bus"]
        )

    def read_disk(self, path: Path, volume: Path, name: str) -> dict[str, Any] | None:
        vm = self.vm
        disk: dict[str, Any] = {"name": name}
        if vm.has(*path, "cdrom"):
            disk.update(role="cdrom", bus=self._bus((*path, "cdrom")))
            self.expect((*path, "cdrom", "readonly"), (True,), "A CD-ROM is read-only.")
        elif vm.has(*path, "disk"):
            disk.update(role="secondary", bus=self._bus((*path, "disk")))
        else:
            self.problem(path, "Give a disk or a cdrom; the console has no other drives.")
            return None
        if vm.has(*path, "bootOrder"):
            disk["boot_order"] = vm.get(*path, "bootOrder")
        self.expect((*path, "serial"), (name[:20],), "A disk's serial is its name.")
        if vm.has(*volume, "containerDisk"):
            reference = str(vm.get(*volume, "containerDisk", "image"))
            disk.update(
                role="container", image=self._image((*volume, "containerDisk", "image"), reference)
            )
            existing = self.project.disks.filter(name=name).first()
            disk["size_gb"] = existing.size_gb if existing else 1
            return disk
        if not vm.has(*volume, "dataVolume"):
            self.problem(
                volume, "Give a dataVolume or a containerDisk: the console has no other volumes."
            )
            return None
        source_name = vm.get(*volume, "dataVolume", "name")
        if source_name not in self.templates:
            self.problem(
                (*volume, "dataVolume", "name"), f"No dataVolumeTemplate is named {source_name}."
            )
            return None
        template = ("spec", "dataVolumeTemplates", self.templates[source_name])
        vm.get(*template, "metadata", "name")
        for key, value in MANAGED_BY.items():
            self.expect(
                (*template, "metadata", "labels", key),
                (value,),
                "Only the console's label goes here.",
            )
        size = mebibytes(vm.get(*template, "spec", "storage", "resources", "requests", "storage"))
        if size is None or size % 1024:
            self.problem(
                (*template, "spec", "storage"), "Give resources.requests.storage in whole Gi."
            )
        else:
            disk["size_gb"] = size // 1024
        image = vm.get(*template, "metadata", "annotations", IMAGE)
        source = (*template, "spec", "source")
        if vm.has(*source, "blank"):
            if image is not None:
                disk["image"] = image  # a kernel image boots from the kernelBoot container
        elif vm.has(*source, "registry", "url"):
            reference = str(vm.get(*source, "registry", "url")).removeprefix("docker://")
            disk["image"] = image or self._image((*source, "registry", "url"), reference)
        elif vm.has(*source, "http", "url"):
            if image is None:
                self.problem(
                    source,
                    f"Say which image of the project this is: annotate the template {IMAGE}.",
                )
            disk["image"] = image
        elif vm.has(*source, "pvc", "name"):
            claim = f"{vm.get(*source, 'pvc', 'namespace')}/{vm.get(*source, 'pvc', 'name')}"
            disk["image"] = image or self._image((*source, "pvc"), claim)
        else:
            self.problem(source, "Give an http, registry, pvc or blank source.")
        return disk

    # Cloud-init and interfaces

    def _secret_value(self, path: Path, key: str) -> str | None:
        secret = self.companions.secret(str(self.vm.get(*path, "name")))
        if secret is None:
            self.problem(path, "Put the Secret it names in the same files.")
            return None
        value = secret.get("stringData", key)
        if value is None:
            self.problems.append(secret.problem(("stringData",), f"Give stringData.{key}."))
        return value

    def read_cloud_init(self, path: Path) -> None:
        vm, spec = self.vm, self.spec
        text = vm.get(*path, "userData")
        if vm.has(*path, "secretRef"):
            text = self._secret_value((*path, "secretRef"), "userdata")
        network_path = (*path, "networkData")
        network = vm.get(*network_path)
        if vm.has(*path, "networkDataSecretRef"):
            network_path = (*path, "networkDataSecretRef")
            network = self._secret_value(network_path, "networkdata")
        self.addresses, unreadable = static_addresses(network or "")
        if unreadable:
            self.problem(network_path, unreadable)
        mode = vm.get("metadata", "annotations", USER_DATA, default=UserDataMode.CUSTOM)
        spec["user_data_mode"] = mode
        existing = self.existing
        if vm.has("metadata", "annotations", REDACTED_MARK):  # refused as a whole: no more
            spec["custom_user_data"] = existing.custom_user_data if existing else ""
        elif mode == UserDataMode.DEFAULT:
            spec["custom_user_data"] = existing.custom_user_data if existing else ""
            if existing is not None and text is not None and text != user_data(existing):
                self.problem(path, "This is not the user data the console wrote for this instance; "
                             "to give your own, annotate zopday.io/user-data: custom.")  # fmt: skip
        else:
            spec["custom_user_data"] = text or ""

    def read_nics(self) -> None:
        vm = self.vm
        networks = {
            n.get("name"): i
            for i, n in enumerate(vm.get(*DOMAIN[:-1], "networks", default=[]) or [])
        }
        nics: list[dict[str, Any]] = []
        addresses = self.addresses
        for index, _ in enumerate(vm.get(*DEVICES, "interfaces", default=[]) or []):
            path = (*DEVICES, "interfaces", index)
            name = vm.get(*path, "name")
            nic: dict[str, Any] = {}
            if (mac := vm.get(*path, "macAddress")) is not None:
                nic["mac"] = str(mac).lower()
                nic.update(addresses.get(nic["mac"], {}))
            model = vm.get(*path, "model", default=NicModel.VIRTIO)
            if model not in NicModel.values:
                self.problem((*path, "model"), "Choose the model virtio or e1000.")
            nic["model"] = model
            state = vm.get(*path, "state", default="up")
            if state not in ("up", "down"):
                self.problem((*path, "state"), "Choose the state up or down.")
            nic["link"] = "down" if state == "down" else "up"
            if state == "down" and index == 0:
                nic["confirm_primary"] = True
            if not (vm.has(*path, "bridge") or vm.has(*path, "masquerade")):
                self.problem(path, "Give a bridge (or masquerade) binding.")
            if name not in networks:
                self.problem((*path, "name"), f"No network is named {name}.")
                continue
            network = (*DOMAIN[:-1], "networks", networks[name])
            vm.get(*network, "name")
            vm.get(*network, "multus", "default")
            target = vm.get(*network, "multus", "networkName")
            if target is None:
                self.problem(network, "Give a multus network: every interface is on a subnet.")
                continue
            nic["subnet"] = self._subnet((*network, "multus", "networkName"), str(target))
            nics.append(nic)
        self.spec["nics"] = nics

    def _subnet(self, path: Path, target: str) -> str | int | None:
        nad = self.companions.network(target)
        if nad is not None and (name := nad.get("metadata", "annotations", SUBNET)) is not None:
            return str(name)
        for subnet in self.project.subnets.all():
            if subnet.segment == target.rsplit("/", 1)[-1]:
                return subnet.pk
        self.problem(path, f"Annotate its NetworkAttachmentDefinition {SUBNET}: the subnet's name.")
        return None
