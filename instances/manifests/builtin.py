"""The console's own kinds, registered when the app starts (provisioning adds its own)."""

from instances.manifests.disks import DISK
from instances.manifests.elastic_ips import ELASTIC_IP
from instances.manifests.images import IMAGE
from instances.manifests.instances import INSTANCE
from instances.manifests.kinds import kind_register
from instances.manifests.ssh_keys import SSH_KEY
from instances.manifests.subnets import SUBNET


def builtin_kinds_register() -> None:
    for kind in (SUBNET, SSH_KEY, IMAGE, DISK, INSTANCE, ELASTIC_IP):
        kind_register(kind)
