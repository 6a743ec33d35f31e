"""The manifest's shapes: the API's input schemas, but refusing fields they do not know.

The API ignores unknown fields in a JSON body; a manifest lives in a repository for a long time,
so a misspelt field (`run_stratgy`) must be an error rather than a silently ignored line. Every
other rule, and every message, is the API's own.
"""

from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from instances.api.schemas import DiskIn, InstanceIn, NicIn, Slug, Text
from instances.choices import LinkState

STRICT = ConfigDict(extra="forbid")


class DocumentIn(Schema):
    """One YAML document: what it is, where it goes, and its spec (checked on its own, once the
    project is known, since names in it are looked up there)."""

    model_config = STRICT

    kind: Literal["Instance"]
    project: Slug
    name: Text
    spec: dict[str, Any]


class DiskSpec(DiskIn):
    model_config = STRICT


class NicSpec(NicIn):
    """An interface; its position in `nics` is its name (the first is eth0). `link` and
    `confirm_primary` are those of the API's NicLinkIn."""

    model_config = STRICT

    link: LinkState = LinkState.UP
    confirm_primary: bool = Field(
        False, description="Needed to take the primary interface (eth0) down."
    )


class InstanceSpec(InstanceIn):
    model_config = STRICT

    # Narrower item types than InstanceIn's, so that the items refuse unknown fields too.
    disks: list[DiskSpec] = []  # type: ignore[assignment]
    nics: list[NicSpec] = Field([], description="eth0 first; at least one.")  # type: ignore[assignment]
