from .audit import AuditEvent
from .disks import Disk, DiskSnapshot
from .images import Image
from .keys import SSHKey
from .machines import Instance
from .network import ElasticIP, IPLease, NetworkInterface, Subnet
from .projects import Membership, Project

__all__ = [
    "AuditEvent",
    "Disk",
    "DiskSnapshot",
    "ElasticIP",
    "IPLease",
    "Image",
    "Instance",
    "Membership",
    "NetworkInterface",
    "Project",
    "SSHKey",
    "Subnet",
]
