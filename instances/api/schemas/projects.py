"""Bodies of projects, images, subnets and SSH keys."""

from datetime import datetime

from ninja import Field, Schema

from instances.api.schemas.base import In, Text
from instances.choices import (
    ImageKind,
    OsType,
    Role,
)
from instances.models import Image


class ProjectOut(Schema):
    slug: str
    name: str
    description: str
    role: Role


class ImageOut(Schema):
    id: int
    name: str
    kind: ImageKind
    os_type: OsType
    min_disk_gb: int
    description: str
    reference: str = Field(description="A container disk's OCI reference; empty for others.")
    shared: bool

    @staticmethod
    def resolve_shared(image: Image) -> bool:
        return image.project_id is None


class SubnetIn(In):
    name: Text
    zone: Text
    cidr_v4: Text = ""
    cidr_v6: Text = ""
    gateway: Text | None = Field(None, description="Defaults to the first address.")
    dns_resolvers: Text = Field("", description="Comma-separated IP addresses.")


class SubnetOut(Schema):
    id: int
    name: str
    zone: str
    cidr_v4: str
    cidr_v6: str
    gateway: str | None
    dns_resolvers: str
    created_at: datetime


class SSHKeyIn(In):
    name: Text
    public_key: Text = Field(description="An OpenSSH public key, e.g. ssh-ed25519 AAAA... me@host")


class SSHKeyOut(Schema):
    id: int
    name: str
    public_key: str
    fingerprint: str
    created_at: datetime
