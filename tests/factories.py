"""Factories for the models the tests need; no fixture files."""

import factory
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from instances.choices import ImageKind, Role
from instances.models import Image, Instance, Membership, Project, Subnet
from instances.services.instances import InstanceRequest, NicRequest, instance_create

PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    project = factory.SubFactory(ProjectFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.VIEWER


class SubnetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Subnet

    project = factory.SubFactory(ProjectFactory)
    name = factory.Sequence(lambda n: f"net{n}")
    zone = "local-1a"
    cidr_v4 = factory.Sequence(lambda n: f"10.{n % 250}.0.0/24")
    gateway = factory.LazyAttribute(lambda o: o.cidr_v4.replace(".0/24", ".1"))
    dns_resolvers = "10.0.0.53"


class ImageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Image

    name = factory.Sequence(lambda n: f"image-{n}")
    kind = ImageKind.KERNEL
    path = "demo"
    min_disk_gb = 1


def instance_request(subnet: Subnet, image: Image | None = None, **fields) -> InstanceRequest:
    """A valid request for a small instance on the subnet; override any field."""
    nics = fields.pop("nics", None)
    return InstanceRequest(
        **{
            "name": "web-1",
            "zone": subnet.zone,
            "root_image": image or ImageFactory(),
            "root_size_gb": 1,
            "nics": nics if nics is not None else [NicRequest(subnet=subnet)],
            **fields,
        }
    )


def demo_image(name: str = "demo") -> Image:
    """The demo guest image that bin/zop test builds, for tests that boot real guests."""
    folder = settings.ZOPDAY_IMAGES_DIR / "demo"
    if not (folder / "initrd.img").exists():
        pytest.fail("the demo image is missing: bin/zop test builds it")
    return Image.objects.create(name=name, kind=ImageKind.KERNEL, path=str(folder))


def demo_instance(*, actor, image: Image, subnet: Subnet, name: str, ip: str, **fields) -> Instance:
    """An instance of the demo guest, created through the service, with a static IPv4."""
    request = instance_request(
        subnet, image=image, name=name, nics=[NicRequest(subnet, ipv4=ip)], **fields
    )
    return instance_create(project=subnet.project, actor=actor, request=request)
