"""The Session Manager API calls the console makes (StartSession, ResumeSession,
TerminateSession, DescribeInstanceInformation), answered in AWS's JSON protocol; every other
request goes on to moto unchanged, so one endpoint URL serves a whole cloud account."""

import http.client
import json
import re
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from . import SsmFake

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
ACCOUNT = "123456789012"
REGION = re.compile(r"Credential=[^/]+/[0-9]+/([a-z0-9-]+)/")


class AwsError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class FrontHandler(BaseHTTPRequestHandler):
    """Answers the session calls itself and relays the rest to moto."""

    fake: "SsmFake"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _any(self) -> None:
        body = self._body()
        target = self.headers.get("X-Amz-Target", "")
        operation = target.removeprefix("AmazonSSM.")
        answer = (
            getattr(self.fake, f"api_{operation}", None)
            if target.startswith("AmazonSSM.")
            else None
        )
        if answer is None:
            self._relay(body)
            return
        region = REGION.search(self.headers.get("Authorization", ""))
        try:
            result = answer(json.loads(body or b"{}"), region.group(1) if region else "us-east-1")
        except AwsError as error:
            self._json(error.status, {"__type": error.code, "message": error.message}, error.code)
            return
        self._json(200, result)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _any

    def _json(self, status: int, value: object, error_type: str = "") -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        if error_type:
            self.send_header("x-amzn-ErrorType", error_type)
        self.end_headers()
        self.wfile.write(data)

    def _relay(self, body: bytes) -> None:
        upstream = urlsplit(self.fake.upstream)
        connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = self.headers.get("Host", upstream.netloc)
        try:
            connection.request(self.command, self.path, body=body or None, headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
