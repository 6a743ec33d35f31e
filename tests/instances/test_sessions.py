"""Sessions kept in a signed cookie while the disk is full: they hold for an hour at most, since
logging out cannot end them on the server."""

import pytest
from django.core import signing

from instances import sessions
from instances.sessions import SessionStore

pytestmark = pytest.mark.django_db


def signed_session(data: dict) -> str:
    return signing.dumps(data, salt=sessions.SALT, serializer=SessionStore().serializer)


def test_a_cookie_session_is_read_within_its_hour():
    key = signed_session({"_auth_user_id": "7"})
    assert SessionStore(key).load() == {"_auth_user_id": "7"}


def test_a_cookie_session_past_its_hour_is_no_session(monkeypatch):
    key = signed_session({"_auth_user_id": "7"})
    later = signing.time.time() + sessions.SIGNED_SESSION_SECONDS + 1
    monkeypatch.setattr(signing.time, "time", lambda: later)
    store = SessionStore(key)
    assert store.load() == {}
