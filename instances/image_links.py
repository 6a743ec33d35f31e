"""Signed, expiring links through which a cluster's importer (CDI) fetches an image's file from
this console: the cluster cannot read the console's disk, and each link opens one file of one
image for LINK_SECONDS, to whoever holds it."""

from pathlib import Path
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.urls import reverse

from instances.backends.base import BackendError, DiskSpec
from instances.choices import ImageKind
from instances.models import Image

SALT = "zopday.image-import"
LINK_SECONDS = 24 * 3600  # CDI retries a failed import with the same link for a while
LINKED_KINDS = (ImageKind.QCOW2, ImageKind.ISO)  # images that are one file a disk imports


def image_link(image: Image) -> str:
    """The address, under ZOPDAY_PUBLIC_URL, at which the image's file can be fetched."""
    if not settings.ZOPDAY_PUBLIC_URL:
        raise BackendError(
            f"The cluster cannot import {image.name}: set ZOPDAY_PUBLIC_URL to the address the "
            "cluster reaches this console at."
        )
    name = image.file.name
    signed = signing.TimestampSigner(salt=SALT).sign_object({"image": image.pk, "file": name})
    path = reverse("image-import", args=[image.pk, name])
    return f"{settings.ZOPDAY_PUBLIC_URL}{path}?{urlencode({'link': signed})}"


def link_opens(link: str, pk: int, file_name: str) -> bool:
    """Whether `link` was signed here for this image's file and has not expired."""
    try:
        signed = signing.TimestampSigner(salt=SALT).unsign_object(link, max_age=LINK_SECONDS)
    except signing.BadSignature:  # SignatureExpired is one
        return False
    return isinstance(signed, dict) and signed == {"image": pk, "file": file_name}


def disk_image_url(disk: DiskSpec) -> str:
    """The KubeVirt backend's `image_url`: a link to the image a disk is made from; "" for a
    disk from no image the console holds."""
    if disk.source is None:
        return ""
    source = Path(disk.source)
    for image in Image.objects.filter(kind__in=LINKED_KINDS).order_by("pk"):
        if image.file == source:
            return image_link(image)
    return ""
