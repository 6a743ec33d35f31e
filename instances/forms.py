"""Forms of the instance pages. They collect input; the services validate the rules, and
`apply_errors` puts each service message back at the field it concerns."""

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from instances.api.schemas import DiskIn, InstanceIn, NicIn
from instances.choices import (
    RUN_STRATEGY_HELP,
    DiskRole,
    ImageKind,
    ImportFormat,
    OsType,
)
from instances.create_fields import form_fields_of, zone_choices
from instances.models import Image, Instance, Project, SSHKey, Subnet
from instances.models.disks import DISK_SOURCE_KINDS
from instances.services import ipam


def images_for(project: Project, *kinds: str) -> QuerySet[Image]:
    return Image.objects.filter(Q(project=project) | Q(project=None), kind__in=kinds)


@form_fields_of(InstanceIn)
class InstanceForm(forms.Form):
    """The create page: InstanceIn's fields, with pickers for the ids it takes."""

    root_image = forms.ModelChoiceField(
        queryset=Image.objects.none(),
        label="Root disk image",
        required=False,
        empty_label="None: a blank disk, installed from the CD-ROM",
    )
    cdrom_image = forms.ModelChoiceField(
        queryset=Image.objects.none(), required=False, label="CD-ROM (ISO)", empty_label="No CD-ROM"
    )
    container_image = forms.ModelChoiceField(
        queryset=Image.objects.none(),
        required=False,
        label="Container disk (OCI)",
        empty_label="No container disk",
        help_text="Pulled from its registry at the first start; boots before a blank root disk.",
    )
    ssh_keys = forms.ModelMultipleChoiceField(
        queryset=SSHKey.objects.none(),
        required=False,
        label="SSH keys",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: object, project: Project, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        images = images_for(project, *DISK_SOURCE_KINDS)
        self.fields["root_image"].queryset = images  # type: ignore[attr-defined]
        # a file image first; blank only when chosen
        self.fields["root_image"].initial = (
            images.exclude(kind=ImageKind.CONTAINER).first() or images.first()
        )
        self.fields["cdrom_image"].queryset = images_for(project, ImageKind.ISO)  # type: ignore[attr-defined]
        containers = images_for(project, ImageKind.CONTAINER)
        self.fields["container_image"].queryset = containers  # type: ignore[attr-defined]
        self.fields["ssh_keys"].queryset = project.ssh_keys.all()  # type: ignore[attr-defined]
        self.run_strategy_help = RUN_STRATEGY_HELP
        # "Runs on" is asked only when there is a choice: the console's hosts or a cluster
        self.offers_clusters = len(list(self.fields["cluster"].choices)) > 1  # type: ignore[attr-defined]


@form_fields_of(DiskIn)
class DiskRowForm(forms.Form):
    """A disk row of the create form: DiskIn's marked fields."""


@form_fields_of(NicIn)
class NicRowForm(forms.Form):
    """An interface row of the create form: NicIn's marked fields and a subnet picker."""

    subnet = forms.ModelChoiceField(queryset=Subnet.objects.none(), empty_label=None)

    def __init__(self, *args: object, project: Project, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["subnet"].queryset = project.subnets.all()  # type: ignore[attr-defined]
        self.fields["subnet"].error_messages["required"] = (
            "Choose a subnet (a project without one needs it created first, on the Subnets page)."
        )

    def clean(self) -> dict:
        """Static addresses checked here too, so that they show with the form's other mistakes
        (creating the instance checks them again, under its transaction)."""
        data = super().clean() or {}
        if subnet := data.get("subnet"):
            for field, version in (("ipv4", 4), ("ipv6", 6)):
                if value := (data.get(field) or "").strip():
                    try:
                        ipam.check_static_address(subnet, value, field, version)
                    except ValidationError as error:
                        self.add_error(None, error)
        return data


class DiskAddForm(DiskRowForm):
    """The Storage tab's "New disk": a disk created in the instance's zone and attached to it."""

    name = forms.CharField(max_length=72)
    role = forms.ChoiceField(
        label="Kind",
        choices=[(DiskRole.SECONDARY, "Secondary disk"), (DiskRole.CDROM, "CD-ROM drive")],
        initial=DiskRole.SECONDARY,
    )
    field_order = ["name", "size_gb", "bus", "role"]

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("auto_id", "new-disk-%s")  # the tab's other forms use id_*
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


class NicAddForm(NicRowForm):
    """The Networking tab's "Attach to a subnet": one more interface, on a subnet of the
    instance's zone."""

    def __init__(self, *args: object, instance: Instance, **kwargs: object) -> None:
        kwargs.setdefault("auto_id", "nic-%s")  # the tab's other forms use id_*
        super().__init__(*args, project=instance.project, **kwargs)
        subnet = self.fields["subnet"]
        subnet.queryset = instance.project.subnets.filter(zone=instance.zone)  # type: ignore[attr-defined]
        subnet.error_messages["invalid_choice"] = f"Choose a subnet in {instance.zone}."
        subnet.error_messages["required"] = (
            f"Choose a subnet in {instance.zone} (create one first, on the Subnets page)."
        )


DiskFormSet = forms.formset_factory(DiskRowForm, extra=0, max_num=16)
NicFormSet = forms.formset_factory(NicRowForm, extra=0, min_num=1, max_num=8)


def apply_errors(
    error: ValidationError, form: forms.Form, formsets: dict[str, forms.BaseFormSet]
) -> None:
    """Put each service message at its field: `nics-0-mac` goes to row 0 of the NIC formset."""
    for key, messages in error.message_dict.items():
        prefix, _, rest = key.partition("-")
        if prefix in formsets and rest:
            index, _, field = rest.partition("-")
            rows = formsets[prefix].forms
            if index.isdigit() and int(index) < len(rows):
                row = rows[int(index)]
                for message in messages:
                    row.add_error(field if field in row.fields else None, message)
                continue
        target = key if key in form.fields else None
        for message in messages:
            form.add_error(target, message)


class SubnetForm(forms.Form):
    name = forms.CharField(max_length=63)
    zone = forms.ChoiceField(choices=zone_choices)
    cidr_v4 = forms.CharField(label="IPv4 CIDR", required=False, help_text="e.g. 10.0.1.0/24")
    cidr_v6 = forms.CharField(label="IPv6 CIDR", required=False, help_text="e.g. fd00:1::/64")
    gateway = forms.CharField(required=False, help_text="Defaults to the first address")
    dns_resolvers = forms.CharField(
        label="DNS resolvers",
        required=False,
        help_text="Comma-separated, e.g. 1.1.1.1, 9.9.9.9. Blank: the console's default ones.",
    )


class SSHKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    public_key = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA... you@laptop"})
    )


class ImageUploadForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(
        choices=[(ImageKind.QCOW2, ImageKind.QCOW2.label), (ImageKind.ISO, ImageKind.ISO.label)]
    )
    os_type = forms.ChoiceField(label="OS", choices=OsType.choices, initial=OsType.LINUX)
    description = forms.CharField(max_length=200, required=False)
    file = forms.FileField(help_text="A standalone qcow2 image, or an ISO 9660 image.")


class ImageImportForm(forms.Form):
    """Import an image from a URL; the service checks the address and the checksum."""

    name = forms.CharField(max_length=100)
    format = forms.ChoiceField(choices=ImportFormat.choices, label="Format")
    url = forms.CharField(
        label="URL", max_length=2000, help_text="An http:// or https:// address of the file."
    )
    sha256 = forms.CharField(
        label="SHA-256", max_length=71, required=False,
        help_text="Optional: the file's checksum, checked once it has arrived.",
    )  # fmt: skip
    os_type = forms.ChoiceField(label="OS", choices=OsType.choices, initial=OsType.LINUX)
    description = forms.CharField(max_length=200, required=False)


class ContainerImageForm(forms.Form):
    """Register a container disk image by its OCI reference; the service asks the registry."""

    name = forms.CharField(max_length=100)
    reference = forms.CharField(
        max_length=300,
        help_text="registry/repository:tag or registry/repository@sha256:digest, its layer "
        "holding /disk/<name>.qcow2 or .img (KubeVirt's containerDisk layout).",
    )
    os_type = forms.ChoiceField(label="OS", choices=OsType.choices, initial=OsType.LINUX)
    description = forms.CharField(max_length=200, required=False)
