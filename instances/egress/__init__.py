"""One egress policy for every address the console fetches from on a user's word: image
imports, container registries, git sources and cloud endpoints (instances.egress.policy)."""

from .policy import (
    EgressRefused,
    UrlParts,
    blocked,
    checked_addresses,
    literal,
    literal_refusal,
    loopback,
    refusal,
    refuse_peer,
    split_url,
)

__all__ = [
    "EgressRefused",
    "UrlParts",
    "blocked",
    "checked_addresses",
    "literal",
    "literal_refusal",
    "loopback",
    "refusal",
    "refuse_peer",
    "split_url",
]
