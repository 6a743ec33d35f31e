"""A repository's push webhook: GitHub's (and Gitea's) X-Hub-Signature-256, an HMAC-SHA256 of
the body with the source's secret, or GitLab's X-Gitlab-Token, the secret itself; and what tells
one delivery from a replay of it."""

import hashlib
import hmac
import json
from collections.abc import Mapping


def signature_valid(*, secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    if not secret:
        return False
    signature = headers.get("X-Hub-Signature-256", "")
    if signature:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(signature.encode(), expected.encode())
    token = headers.get("X-Gitlab-Token", "")
    return bool(token) and hmac.compare_digest(token.encode(), secret.encode())


# GitHub's, Gitea's, then GitLab's (Idempotency-Key stays the same across its retries)
DELIVERY_HEADERS = (
    "X-GitHub-Delivery",
    "X-Gitea-Delivery",
    "Idempotency-Key",
    "X-Gitlab-Event-UUID",
)


def delivery_keys(*, body: bytes, headers: Mapping[str, str]) -> list[str]:
    """What a replay would repeat: the delivery id, and the body, which the signature covers
    where the id is not (a replay may give a new id, not a new body)."""
    keys = ["body:" + hashlib.sha256(body).hexdigest()]
    for name in DELIVERY_HEADERS:
        if delivery := headers.get(name, "").strip():
            keys.append("id:" + hashlib.sha256(delivery.encode()).hexdigest())
            break
    return keys


def pushed_branch(body: bytes) -> str | None:
    """The branch a push event names (its `ref`), None for another event or an unreadable body."""
    try:
        ref = json.loads(body).get("ref")
    except (ValueError, AttributeError):
        return None
    if isinstance(ref, str) and ref.startswith("refs/heads/"):
        return ref.removeprefix("refs/heads/")
    return None
