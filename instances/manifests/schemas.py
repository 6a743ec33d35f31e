"""The manifest's shapes: the API's input schemas (which refuse unknown fields, so a misspelt
`run_stratgy` is an error), with an interface's link state added. Every rule and message is the
API's own."""

from typing import Any

from ninja import Field, Schema
from pydantic import ConfigDict

from instances.api.schemas import InstanceIn, NicIn, Slug, Text
from instances.choices import LinkState


class DocumentIn(Schema):
    """One YAML document: what it is, where it goes, and its spec (checked once the project is
    known, since names in it are looked up there)."""

    model_config = ConfigDict(extra="forbid")

    kind: Text = Field(description="Instance, Subnet, SSHKey, Disk, ElasticIP, Image, ...")
    project: Slug
    name: Text
    spec: dict[str, Any]


class NicSpec(NicIn):
    """An interface; its position in `nics` is its name (the first is eth0). `link` and
    `confirm_primary` are those of the API's NicLinkIn."""

    link: LinkState = LinkState.UP
    confirm_primary: bool = Field(
        False, description="Needed to take the primary interface (eth0) down."
    )


class InstanceSpec(InstanceIn):
    nics: list[NicSpec] = Field([], description="eth0 first; at least one.")  # type: ignore[assignment]
