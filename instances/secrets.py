"""Secrets encrypted at rest with Fernet (cloud keys, cluster tokens); the key is
settings.ZOPDAY_SECRETS_KEY."""

from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


@cache
def _fernet(key: str) -> Fernet:
    return Fernet(key.encode())


def encrypt(plaintext: str) -> str:
    if not plaintext:
        return ""
    return _fernet(settings.ZOPDAY_SECRETS_KEY).encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext, or "" when there is none or the key has changed since it was stored."""
    if not token:
        return ""
    try:
        return _fernet(settings.ZOPDAY_SECRETS_KEY).decrypt(token.encode()).decode()
    except InvalidToken:
        return ""
