from django.conf import settings
from django.db import models

from instances import secrets


class Cluster(models.Model):
    """A Kubernetes cluster with KubeVirt that instances may run on, added by an administrator:
    its API server, the CA that signs it, and the console's service-account token (encrypted at
    rest). Each project's instances live in a namespace of their own on it."""

    name = models.SlugField(unique=True, help_text="How the create form names it, e.g. lab.")
    api_url = models.URLField(
        "API server", help_text="The cluster's API server, e.g. https://k8s.example.com:6443."
    )
    ca_certificate = models.TextField(
        "CA certificate",
        blank=True,
        help_text="PEM of the CA that signs the API server's certificate (empty: the system's).",
    )
    token_encrypted = models.TextField(blank=True, editable=False)
    namespace_prefix = models.CharField(
        max_length=20, default="zop-", help_text="A project's namespace is this plus its slug."
    )
    kernel_image = models.CharField(
        max_length=300,
        blank=True,
        help_text="OCI image with /boot/vmlinuz and /boot/initrd.img, for kernel-boot images.",
    )
    zones = models.JSONField(
        default=list, blank=True, editable=False,
        help_text="Its nodes' topology.kubernetes.io/zone labels, as last read.",
    )  # fmt: skip
    capacity = models.JSONField(
        default=dict, blank=True, editable=False,
        help_text="Per zone, the most one node gives a machine (memory_mb, cpus), as last read.",
    )  # fmt: skip
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def token(self) -> str:
        return secrets.decrypt(self.token_encrypted)

    @token.setter
    def token(self, plaintext: str) -> None:
        self.token_encrypted = secrets.encrypt(plaintext)

    def namespace_for(self, slug: str) -> str:
        return f"{self.namespace_prefix}{slug}"


def all_zones() -> list[str]:
    """The zones of this console's hosts, then those of its clusters' nodes: where subnets and
    disks may be."""
    zones = list(settings.ZOPDAY_ZONES)
    for listed in Cluster.objects.values_list("zones", flat=True):
        zones.extend(zone for zone in listed if zone not in zones)
    return zones


def zones_message(zones: list[str]) -> str:
    return f"Choose one of the zones: {', '.join(zones)}."
