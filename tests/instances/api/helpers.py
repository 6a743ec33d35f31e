"""Helpers of the API tests: a JSON client, error bodies, SSH keys."""

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.test import Client


class Api:
    """A test client speaking JSON to /api/v1 with the given headers."""

    def __init__(self, client: Client, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.headers = headers or {}

    def get(self, path, params=None):
        return self.client.get(f"/api/v1{path}", params or {}, headers=self.headers)

    def post(self, path, body=None):
        return self._send("post", path, body)

    def patch(self, path, body=None):
        return self._send("patch", path, body)

    def upload(self, path, data):
        """multipart/form-data: file fields are open files."""
        return self.client.post(f"/api/v1{path}", data, headers=self.headers)

    def delete(self, path):
        return self.client.delete(f"/api/v1{path}", headers=self.headers)

    def _send(self, method, path, body):
        return getattr(self.client, method)(
            f"/api/v1{path}",
            body if body is not None else {},
            content_type="application/json",
            headers=self.headers,
        )


def errors_of(response) -> dict[str, list[str]]:
    assert response.status_code == 422, response.content
    return response.json()["errors"]


def public_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode() + " me@laptop"
