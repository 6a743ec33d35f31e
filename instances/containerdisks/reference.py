"""OCI image references as a container disk names them: registry/repository:tag or
registry/repository@sha256:digest (the registry is always given: nothing is pulled from a
default one)."""

import re
from dataclasses import dataclass

from .errors import ContainerDiskError

REGISTRY = re.compile(r"^(localhost|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+"
                      r"|\d{1,3}(\.\d{1,3}){3}|\[[0-9a-f:]+\])(:\d{1,5})?$")  # fmt: skip
REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+|__[a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
EXAMPLE = "registry.example.com/disks/fedora:40 or …/fedora@sha256:<64 hex digits>"


@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port]
    repository: str
    tag: str = ""
    digest: str = ""

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}" + (
            f"@{self.digest}" if self.digest else f":{self.tag}"
        )

    def pinned(self, digest: str) -> "Reference":
        """The same image by digest: what a pull of `digest` fetches, whatever the tag says."""
        return Reference(self.registry, self.repository, digest=digest)


def parse_reference(text: str) -> Reference:
    """The reference, or a ContainerDiskError saying what is wrong with it."""
    text = text.strip()
    registry, slash, rest = text.partition("/")
    if not slash or not REGISTRY.match(registry) or ("." not in registry and ":" not in registry
                                                     and registry != "localhost"):  # fmt: skip
        raise ContainerDiskError(
            f"Start the reference with the registry's host name (and port), as in {EXAMPLE}."
        )
    digest = tag = ""
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not DIGEST.match(digest):
            raise ContainerDiskError("A digest is sha256: followed by 64 lowercase hex digits.")
    elif ":" in rest.rsplit("/", 1)[-1]:
        rest, _, tag = rest.rpartition(":")
        if not TAG.match(tag):
            raise ContainerDiskError(f"{tag!r} is not a valid tag (letters, digits, . _ -).")
    else:
        raise ContainerDiskError(f"Give a tag or a digest after the repository, as in {EXAMPLE}.")
    if not REPOSITORY.match(rest):
        raise ContainerDiskError(
            f"{rest!r} is not a valid repository: lowercase letters, digits and . _ - / only."
        )
    return Reference(registry, rest, tag=tag, digest=digest)
