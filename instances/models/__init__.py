from .audit import AuditEvent
from .clusters import Cluster
from .consoles import ConsoleSession, ConsoleTicket
from .disks import Disk, DiskSnapshot
from .gitops import GitSource, GitSync, GitWebhookDelivery
from .guest import GuestReport
from .image_imports import ImageImport
from .images import Image
from .keys import SSHKey
from .machines import Instance
from .manifests import ManagedObject
from .network import ElasticIP, IPLease, NetworkInterface, Subnet
from .outbox import OutboxMessage
from .projects import Membership, Project
from .registries import RegistryCredential
from .tokens import ApiToken

__all__ = [
    "ApiToken",
    "AuditEvent",
    "Cluster",
    "ConsoleSession",
    "ConsoleTicket",
    "Disk",
    "DiskSnapshot",
    "ElasticIP",
    "GitSource",
    "GitSync",
    "GitWebhookDelivery",
    "GuestReport",
    "IPLease",
    "Image",
    "ImageImport",
    "Instance",
    "ManagedObject",
    "Membership",
    "NetworkInterface",
    "OutboxMessage",
    "Project",
    "RegistryCredential",
    "SSHKey",
    "Subnet",
]
