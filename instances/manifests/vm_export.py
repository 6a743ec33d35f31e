"""An instance as the `kubevirt.io/v1` objects `kubectl apply -f` takes: its VirtualMachine, the
NoCloud Secret and its subnets' NetworkAttachmentDefinitions, written by the KubeVirt backend's
own mapping (backends.kubevirt.manifests) so an export says what the console would run.

What only the console knows (project, image and subnet names, how the user data was made) goes
in `zopday.io/` annotations, so `manage.py apply -f` maps the export back onto the same instance.
"""

from dataclasses import replace
from typing import Any

import yaml

from instances.backends.base import BackendError, DiskSpec
from instances.backends.kubevirt import manifests
from instances.backends.kubevirt.manifests import MACHINE_LABEL, Placement
from instances.choices import DiskBus, ImageKind
from instances.errors import ActionRefused
from instances.models import Disk, Instance
from instances.redaction import user_data_redacted
from instances.specs import machine_spec

Body = dict[str, Any]

PLACEHOLDER = "FILL-IN.invalid"  # no cluster resolves it: apply refuses any value holding it
KERNEL_PLACEHOLDER = f"{PLACEHOLDER}/kernel-image:latest"

INSTANCE_NAME = "zopday.io/instance-name"  # the backend's own annotation
PROJECT = "zopday.io/project"
CLUSTER = "zopday.io/cluster"
USER_DATA = "zopday.io/user-data"  # default (the console writes it) or custom
SSH_KEYS = "zopday.io/ssh-keys"  # the project's key names, comma-separated
IMAGE = "zopday.io/image"  # on a DataVolume template: the console image it is made from
SUBNET = "zopday.io/subnet"  # on a NetworkAttachmentDefinition: the subnet it carries
REDACTED_MARK = "zopday.io/redacted"  # on an export whose user data's credentials were hidden

HEADER = """\
# Exported by the ZopDay console: `kubectl apply -f` this file to run the instance on a
# cluster with KubeVirt, CDI and Multus; `manage.py apply -f` takes it back.
"""
# Lines (their start, past the indent) that get a comment: the placeholders and the redaction.
COMMENTS = {
    f"url: https://{PLACEHOLDER}/": "FILL IN: an address the cluster can download this image from",
    f"image: {KERNEL_PLACEHOLDER}": "FILL IN: an OCI image with /boot/vmlinuz and /boot/initrd.img",
    f"{REDACTED_MARK}: ": "credentials hidden: only admins export them; apply refuses this",
}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line text (user data, network config), as a person writes it; no
    anchors for objects the mapping shares (a VM's labels and its template's)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """Text, and the console's choices (str enums) as their values."""
    text = str(value)
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _text)
_Dumper.add_multi_representer(str, _text)


def instance_manifest(instance: Instance, *, redact: bool) -> str:
    """The instance's objects as one multi-document YAML stream; `redact` leaves the user data
    out (for those who may not read it) and marks the export so apply refuses it."""
    objects = instance_objects(instance, redact=redact)
    text = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    lines = []
    for line in text.splitlines():
        notes = [note for start, note in COMMENTS.items() if line.lstrip().startswith(start)]
        lines.append(f"{line}  # {notes[0]}" if notes else line)
    return HEADER + "\n".join(lines) + "\n"


def _disk_spec(spec: DiskSpec, disk: Disk) -> DiskSpec:
    """Named as the console names the disk; a disk from a container image with the image's
    reference (as registered, not pinned), which apply finds the image by."""
    image = disk.image
    reference = image.reference if image and image.kind == ImageKind.CONTAINER else ""
    return replace(spec, name=disk.name, reference=reference or spec.reference)


def instance_objects(instance: Instance, *, redact: bool) -> list[Body]:
    """NetworkAttachmentDefinitions, the Secret, then the VirtualMachine, named after the
    instance, in its project's namespace on its cluster (none for an instance on this console's
    hosts: kubectl's current namespace)."""
    cluster = instance.cluster
    namespace = cluster.namespace_for(instance.project.slug) if cluster else ""
    spec = machine_spec(instance)
    disks = {disk.device_name: disk for disk in instance.disks.select_related("image")}
    spec = replace(
        spec,
        id=instance.name,
        disks=tuple(_disk_spec(disk, disks[disk.name]) for disk in spec.disks),
    )
    by_name = {disk.name: disk for disk in disks.values()}
    subnets = {nic.subnet.segment: nic.subnet for nic in instance.nics.select_related("subnet")}
    placement = Placement(
        namespace=namespace,
        run_strategy=instance.run_strategy,
        zone=instance.zone,
        kernel_image=(cluster.kernel_image if cluster else "") or KERNEL_PLACEHOLDER,
    )

    def image_url(disk: DiskSpec) -> str:
        image = by_name[disk.name].image
        return f"https://{PLACEHOLDER}/{image.name}" if image else ""

    try:
        vm = manifests.virtual_machine(
            spec, placement, networks={segment: segment for segment in subnets}, image_url=image_url
        )
    except BackendError as error:
        raise ActionRefused(f"Cannot export {instance.name}: {error.message}") from None
    _annotate(vm, instance, redact)
    for device in vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]:
        disk = by_name.get(device["name"])
        target = device.get("cdrom") or device.get("disk")
        if disk is not None and disk.bus == DiskBus.AUTO and target is not None:
            target.pop("bus", None)  # auto: KubeVirt's preference picks the bus
    templates = {each["metadata"]["name"]: each for each in vm["spec"]["dataVolumeTemplates"]}
    for volume in vm["spec"]["template"]["spec"]["volumes"]:
        disk = by_name.get(volume["name"])
        template = templates.get(volume.get("dataVolume", {}).get("name", ""))
        if template and disk and disk.image and disk.image.kind != ImageKind.CONTAINER:
            template["metadata"]["annotations"] = {IMAGE: disk.image.name}
    objects = []
    for segment, subnet in sorted(subnets.items()):
        nad = manifests.network_attachment(segment, namespace)
        nad["metadata"]["annotations"] = {SUBNET: subnet.name}
        objects.append(nad)
    secret = manifests.seed_secret(spec, namespace)
    if secret is not None:
        if redact:
            data = secret["stringData"]
            data["userdata"] = user_data_redacted(data["userdata"])
            secret["metadata"]["annotations"] = {REDACTED_MARK: "true"}
        objects.append(secret)
    objects.append(vm)
    if not namespace:
        for body in objects:
            body["metadata"].pop("namespace", None)
    return objects


def _annotate(vm: Body, instance: Instance, redact: bool) -> None:
    """The console's names in annotations; the backend's machine label dropped (it ties a VM to
    this console's instance id)."""
    metadata = vm["metadata"]
    for labels in (metadata["labels"], vm["spec"]["template"]["metadata"]["labels"]):
        labels.pop(MACHINE_LABEL, None)
    annotations = metadata["annotations"]
    annotations[PROJECT] = instance.project.slug
    if instance.cluster is not None:
        annotations[CLUSTER] = instance.cluster.name
    annotations[USER_DATA] = instance.user_data_mode
    if keys := sorted(key.name for key in instance.ssh_keys.all()):
        annotations[SSH_KEYS] = ",".join(keys)
    if redact:
        annotations[REDACTED_MARK] = "true"
