"""System checks of provisioning's settings, run by `manage.py check --deploy`."""

import os
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.security, deploy=True)
def secrets_key_is_given(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """In production the key that encrypts cloud account secrets comes from the environment: a
    key generated into the run folder is lost with that folder, and every secret with it."""
    if not settings.PRODUCTION or os.environ.get("ZOPDAY_SECRETS_KEY"):
        return []
    return [
        Warning(
            "ZOPDAY_SECRETS_KEY is not set: cloud account secrets are encrypted with a key "
            f"generated into {settings.RUN_DIR / 'secrets_key'}, and become unreadable if that "
            "file is lost.",
            hint="Set ZOPDAY_SECRETS_KEY to a Fernet key (python -c 'from cryptography.fernet "
            "import Fernet; print(Fernet.generate_key().decode())') and keep it safe.",
            id="provisioning.W001",
        )
    ]
