"""Sessions in the database; while the disk is full, in a signed cookie instead, so that logging
in still works. Such a session moves into the database at its first change once there is room."""

from typing import Any

from django.contrib.sessions.backends import db
from django.core import signing

from instances.disk_full import is_disk_full, unless_disk_full

SALT = "instances.sessions.disk-full"
# A cookie session cannot be ended on the server (logout only forgets it in the browser): it
# holds for an hour at most, and is moved into the database at its first change with room.
SIGNED_SESSION_SECONDS = 3600


class SessionStore(db.SessionStore):
    @staticmethod
    def _signed(key: str | None) -> bool:
        return bool(key) and ":" in str(key)  # database keys are letters and digits only

    def load(self) -> dict[str, Any]:
        if not self._signed(self.session_key):
            return super().load()
        try:
            return signing.loads(
                str(self.session_key),
                salt=SALT,
                serializer=self.serializer,
                max_age=min(self.get_session_cookie_age(), SIGNED_SESSION_SECONDS),
            )
        except signing.BadSignature:
            self._session_key = None
            return {}

    def save(self, must_create: bool = False) -> None:
        if self._signed(self.session_key):
            self._session_key = None  # into the database, with a key of its own, if it fits
            self.create()
            return
        try:
            super().save(must_create)
        except Exception as error:
            if not is_disk_full(error):
                raise
            self._session_key = signing.dumps(
                self._get_session(no_load=must_create),  # type: ignore[attr-defined]
                salt=SALT,
                serializer=self.serializer,
                compress=True,
            )

    def delete(self, session_key: str | None = None) -> None:
        if self._signed(session_key or self.session_key):
            return  # a cookie: nothing is kept here (flush forgets it)
        with unless_disk_full("removing an old session"):  # it expires by itself
            super().delete(session_key)
