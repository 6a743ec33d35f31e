"""A local fake of Google Compute Engine v1 (REST), three IAM service-account calls and the OAuth2
token endpoint, so the GCP provider is tested with the real google-cloud-compute SDK and real
service-account credentials against loopback.

    fake = FakeGce(project="zopday-sandbox")  # serves on 127.0.0.1, a free port
    key = service_account_key(fake, email="zopday@zopday-sandbox.iam.gserviceaccount.com")
    credentials = service_account.Credentials.from_service_account_info(key, scopes=[...])
    networks = compute_v1.NetworksClient(
        credentials=credentials, client_options=ClientOptions(api_endpoint=fake.url)
    )

Every mutating call answers with a compute#operation. Slow work (booting, stopping, deleting,
resizing a managed instance group) finishes on background timers `step_seconds` apart, so a
caller polls the operations endpoints as it would Google's. A booted instance whose user-data
reports to the guest attribute `zopday/bootstrap` gets it set `bootstrap_seconds` later, as
cloud-init's PUT to the metadata server would.

Another process (a Celery worker) shares the fake through `POST /_fake/reset`, `POST
/_fake/configure` and `GET /_fake/state`; `python -m tests.fakes.gce --port 0` serves it
standalone and prints its URL on the first line.

Where it stops: one project (plus three public image families); custom-mode networks
only (an interface must name its subnetwork); no pagination; a MIG never recreates instances.
"""

import argparse
import base64
import copy
import ipaddress
import json
import re
import secrets
import string
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

Body = dict[str, Any]

REGIONS: dict[str, tuple[str, ...]] = {
    "us-central1": ("a", "b", "c", "f"),
    "us-east1": ("b", "c", "d"),
    "europe-west1": ("b", "c", "d"),
    "europe-west4": ("a", "b", "c"),
    "asia-northeast1": ("a", "b", "c"),
}
ZONES = {f"{region}-{letter}": region for region, letters in REGIONS.items() for letter in letters}
IMAGES = {  # (image project, family) → the family's current image
    ("debian-cloud", "debian-12"): "debian-12-bookworm-v20261110",
    ("debian-cloud", "debian-13"): "debian-13-trixie-v20261110",
    ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64"): "ubuntu-2404-noble-amd64-v20261101",
}
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
ACCOUNT_ID = re.compile(r"[a-z]([-a-z0-9]{4,28}[a-z0-9])")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
BOOTSTRAP_ATTRIBUTE = "zopday/bootstrap"
BOOTSTRAP_MARKER = "guest-attributes/zopday/bootstrap"  # in the user-data's curl to metadata
BOOTING = ("PROVISIONING", "STAGING")
DELETED = "DELETED"  # not a GCE status: the step that removes a deleted instance
WAIT_SECONDS = 5.0
DEFAULTS: dict[str, Any] = {
    "step_seconds": 0.2,
    "bootstrap_seconds": 0.5,
    "bootstrap_fails": False,
    "instance_quota": 24,
}


# ---- errors -----------------------------------------------------------------------------------
class ApiError(Exception):
    """An error answer. `body` replaces Compute's shape (IAM and OAuth2 have their own)."""

    def __init__(self, status: int, reason: str, message: str, body: Body | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.body = body or {
            "error": {
                "code": status,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
            }
        }


def not_found(resource: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{resource}' was not found")


def already_exists(resource: str) -> ApiError:
    return ApiError(409, "alreadyExists", f"The resource '{resource}' already exists")


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid", message)


def invalid_field(name: str, value: Any, why: str) -> ApiError:
    return invalid(f"Invalid value for field '{name}': '{value}'. {why}")


def not_ready(resource: str) -> ApiError:
    return ApiError(400, "resourceNotReady", f"The resource '{resource}' is not ready")


def iam_error(status: int, state: str, message: str) -> ApiError:
    return ApiError(
        status, state, message, {"error": {"code": status, "message": message, "status": state}}
    )


def oauth_error(error: str, description: str) -> ApiError:
    return ApiError(400, error, description, {"error": error, "error_description": description})


UNAUTHENTICATED = ApiError(
    401,
    "authError",
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential.",
)
UNAUTHENTICATED.body["error"]["status"] = "UNAUTHENTICATED"


@dataclass(frozen=True)
class OperationError:
    """Why an operation ended DONE with an error (the HTTP call itself succeeded)."""

    code: str
    message: str
    http_status: int = 400


Step = Callable[[], OperationError | None]


# ---- what the fake stores ---------------------------------------------------------------------
@dataclass(frozen=True)
class Collection:
    """A kind of resource: where it lives, what it must have, which fields name other ones."""

    scope: str  # "global", "regions" or "zones"
    kind: str
    required: tuple[str, ...] = ()
    references: tuple[tuple[str, str], ...] = ()  # (field, collection of the resource it names)


NETWORK = (("network", "networks"),)
COLLECTIONS = {
    "networks": Collection("global", "compute#network"),
    "firewalls": Collection("global", "compute#firewall", ("network",), NETWORK),
    "instanceTemplates": Collection("global", "compute#instanceTemplate", ("properties",)),
    "subnetworks": Collection("regions", "compute#subnetwork", ("network", "ipCidrRange"), NETWORK),
    "routers": Collection("regions", "compute#router", ("network",), NETWORK),
    "autoscalers": Collection(
        "regions", "compute#autoscaler", ("target",), (("target", "instanceGroupManagers"),)
    ),
    "instanceGroupManagers": Collection(
        "regions",
        "compute#instanceGroupManager",
        ("baseInstanceName", "instanceTemplate"),
        (("instanceTemplate", "instanceTemplates"),),
    ),
    "instances": Collection("zones", "compute#instance"),
}


@dataclass
class Machine:
    """What the fake knows of an instance beyond its REST body."""

    transition: int = 0  # bumped by each power change: timers of an older one stand down
    resets: int = 0
    deleting: bool = False
    group: str | None = None  # key of the MIG that made it
    guest: dict[str, str] = field(default_factory=dict)  # "namespace/key" → value


@dataclass
class Request:
    query: dict[str, str]
    raw: bytes

    def json(self) -> Body:
        try:
            body = json.loads(self.raw or b"{}")
        except ValueError:
            raise invalid("Invalid JSON payload received.") from None
        if not isinstance(body, dict):
            raise invalid("Invalid JSON payload received: expected an object.")
        return body


def new_id() -> str:
    return str(10**18 + secrets.randbelow(9 * 10**18))


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fingerprint() -> str:
    return base64.b64encode(secrets.token_bytes(8)).decode()


def short(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def jwt_claims(token: str) -> Body | None:
    """The payload of a three-part JWT, unverified; None for anything else."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


# ---- list filters -------------------------------------------------------------------------------
FILTER_TERM = re.compile(
    r'\(?\s*(?P<field>[A-Za-z][\w.-]*)\s*(?P<op>!=|=|\beq\b|\bne\b)\s*(?P<value>"[^"]*"|[^\s()"]+)\s*\)?'
)


def _lookup(body: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        body = body.get(part) if isinstance(body, dict) else None
    return str(body).lower() if isinstance(body, bool) else body


def matches(expression: str, body: Body) -> bool:
    """Compute's list filter, in the forms the provider uses: `labels.k = "v"`, `name eq "re"`
    (the whole name), their negations, and `(term) AND (term)`."""
    if not expression.strip():
        return True
    for term in re.split(r"\s+AND\s+", expression.strip()):
        match = FILTER_TERM.fullmatch(term.strip())
        if not match:
            raise invalid(f"Invalid list filter expression '{expression}'.")
        actual, wanted = _lookup(body, match["field"]), match["value"].strip('"')
        if match["op"] in ("eq", "ne"):
            hit = actual is not None and re.fullmatch(wanted, str(actual)) is not None
        else:
            hit = actual == wanted
        if hit == (match["op"] in ("!=", "ne")):
            return False
    return True


# ---- routing ----------------------------------------------------------------------------------
COMPUTE = r"/compute/v1/projects/(?P<project>[^/]+)"
SCOPED = COMPUTE + r"/(?P<scope>global|regions/(?P<region>[^/]+)|zones/(?P<zone>[^/]+))"
INSTANCES = COMPUTE + r"/zones/(?P<zone>[^/]+)/instances"
GROUPS = COMPUTE + r"/regions/(?P<region>[^/]+)/instanceGroupManagers"
ACCOUNTS = r"/v1/projects/(?P<iam_project>[^/]+)/serviceAccounts"
IMAGES_OF = r"/compute/v1/projects/(?P<image_project>[^/]+)/global/images"
NAMED = r"/(?P<name>[^/]+)"
ROUTES = [  # (method, path, handler), the first match wins
    (method, re.compile(pattern), handler)
    for method, pattern, handler in [
        ("POST", r"/token", "token"),
        ("POST", r"/_fake/reset", "control_reset"),
        ("POST", r"/_fake/configure", "control_configure"),
        ("GET", r"/_fake/state", "control_state"),
        ("POST", ACCOUNTS, "account_create"),
        ("GET", ACCOUNTS + r"/(?P<email>[^/]+)", "account_get"),
        ("DELETE", ACCOUNTS + r"/(?P<email>[^/]+)", "account_delete"),
        ("GET", IMAGES_OF + r"/family/(?P<family>[^/]+)", "image_family"),
        ("GET", IMAGES_OF + NAMED, "image_get"),
        ("GET", COMPUTE + r"/regions/(?P<region>[^/]+)", "region_get"),
        ("GET", COMPUTE + r"/zones", "zone_list"),
        ("GET", COMPUTE + r"/zones/(?P<zone>[^/]+)", "zone_get"),
        ("GET", SCOPED + r"/operations/(?P<operation>[^/]+)", "operation_get"),
        ("POST", SCOPED + r"/operations/(?P<operation>[^/]+)/wait", "operation_wait"),
        ("POST", INSTANCES, "instance_insert"),
        ("DELETE", INSTANCES + NAMED, "instance_delete"),
        ("POST", INSTANCES + NAMED + r"/(?P<action>start|stop|reset)", "instance_power"),
        ("GET", INSTANCES + NAMED + r"/getGuestAttributes", "instance_guest_attributes"),
        ("POST", GROUPS, "group_insert"),
        ("POST", GROUPS + NAMED + r"/resize", "group_resize"),
        ("POST", GROUPS + NAMED + r"/listManagedInstances", "group_managed_instances"),
        ("DELETE", GROUPS + NAMED, "group_delete"),
        ("GET", SCOPED + r"/(?P<collection>\w+)", "collection_list"),
        ("GET", SCOPED + r"/(?P<collection>\w+)" + NAMED, "collection_get"),
        ("POST", SCOPED + r"/(?P<collection>\w+)", "collection_insert"),
        ("DELETE", SCOPED + r"/(?P<collection>\w+)" + NAMED, "collection_delete"),
    ]
]


def route(method: str, path: str) -> tuple[str, dict[str, str]]:
    """The handler's name and the path's parameters."""
    for verb, pattern, handler in ROUTES:
        if verb == method and (match := pattern.fullmatch(path)):
            return handler, {key: value for key, value in match.groupdict().items() if value}
    raise ApiError(404, "notFound", f"The fake does not model {method} {path}")


OPEN_PATHS = ("/token", "/_fake/")  # served without an access token
IMAGE_URL = re.compile(
    r"(?:.*?/)?projects/(?P<project>[^/]+)/global/images/(?P<family>family/)?(?P<name>[^/]+)"
)
REFERENCE = re.compile(
    r"(?:.*?/)?projects/(?P<project>[^/]+)/(?P<path>.+)|(?P<bare>(?:global|regions|zones)/.+)"
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: "FakeGce"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        authorization = self.headers.get("Authorization") or ""
        status, data = self.server.fake.handle(self.command, self.path, authorization, raw)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


# ---- the fake ---------------------------------------------------------------------------------
class FakeGce:
    """Compute Engine, IAM service accounts and OAuth2 tokens for one project, on loopback."""

    def __init__(
        self, project: str = "zopday-sandbox", *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.project = project
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # an operation turned DONE
        self.tokens: dict[str, str] = {}  # access token → the service account it was issued to
        self.timers: set[threading.Timer] = set()
        self.generation = 0  # bumped by reset(): timers of an earlier one stand down
        self._forget()
        self.server = _Server((host, port), _Handler)
        self.server.fake = self
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="fake-gce", daemon=True
        )
        self.thread.start()

    # ---- public interface ---------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every resource, operation, service account, revocation and setting."""
        with self.lock:
            self.generation += 1
            for timer in self.timers:
                timer.cancel()
            self.timers.clear()
            self._forget()
            self.changed.notify_all()

    def configure(self, **settings: Any) -> None:
        """Change some of step_seconds, bootstrap_seconds, bootstrap_fails, instance_quota."""
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"Unknown setting(s): {', '.join(sorted(unknown))}")
        with self.lock:
            for name, value in settings.items():
                kind = type(DEFAULTS[name])
                if kind is bool and not isinstance(value, bool):
                    raise ValueError(f"{name} is true or false, not {value!r}")
                self.config[name] = kind(value)

    def state(self) -> Body:
        """A snapshot for assertions: each collection by resource name (an instance also shows
        the fake's `resets` and `guestAttributes`), then operations, serviceAccounts, config and
        revoked."""
        with self.lock:
            snapshot: Body = {
                collection: {
                    body["name"]: self._view(collection, key) for key, body in items.items()
                }
                for collection, items in self.resources.items()
            }
            for key, machine in self.machines.items():
                guest = dict(machine.guest)
                snapshot["instances"][short(key)] |= {
                    "resets": machine.resets,
                    "guestAttributes": guest,
                }
            snapshot.update(
                operations=self.operations,
                serviceAccounts=self.accounts,
                config=self.config,
                revoked=sorted(self.revoked),
            )
            return json.loads(json.dumps(snapshot))

    def revoke(self, email: str) -> None:
        """The service account's key stops working: the token endpoint refuses it, and the
        tokens and self-signed JWTs it already has are refused too."""
        with self.lock:
            self.revoked.add(email)
            self.tokens = {
                token: issuer for token, issuer in self.tokens.items() if issuer != email
            }

    def stop(self) -> None:
        self.reset()
        self.server.shutdown()
        self.server.server_close()

    # ---- plumbing -----------------------------------------------------------------------------
    def _forget(self) -> None:
        self.config: Body = dict(DEFAULTS)
        self.resources: dict[str, dict[str, Body]] = {name: {} for name in COLLECTIONS}
        self.machines: dict[str, Machine] = {}  # instance key → Machine
        self.group_failures: dict[str, list[Body]] = {}  # MIG key → instances it could not create
        self.operations: dict[str, Body] = {}
        self.accounts: dict[str, Body] = {}
        self.revoked: set[str] = set()

    def handle(self, method: str, target: str, authorization: str, raw: bytes) -> tuple[int, bytes]:
        """Route one HTTP request; answer (status, JSON bytes)."""
        parts = urlsplit(target)
        path, query = unquote(parts.path), dict(parse_qsl(parts.query))
        try:
            handler, params = route(method, path)
            if not path.startswith(OPEN_PATHS):
                self._authorize(authorization)
            with self.lock:
                self._check_location(params)
                answer = getattr(self, handler)(Request(query, raw), params)
                return 200, json.dumps(answer).encode()
        except ApiError as error:
            return error.status, json.dumps(error.body).encode()
        except Exception:  # a bug in the fake: say where, as a 500 the SDK reports
            return 500, json.dumps(
                {"error": {"code": 500, "message": traceback.format_exc(), "errors": []}}
            ).encode()

    def _authorize(self, authorization: str) -> None:
        """An access token this fake issued, or a self-signed JWT of a service account (what
        google-cloud-compute's clients send: they never call the token endpoint)."""
        scheme, _, token = authorization.partition(" ")
        with self.lock:
            if scheme.lower() != "bearer":
                raise UNAUTHENTICATED
            if token in self.tokens:
                return
            claims = jwt_claims(token) or {}
            issuer, expiry = claims.get("iss"), float(claims.get("exp", 0))
            if issuer and issuer not in self.revoked and expiry > time.time():
                return
            raise UNAUTHENTICATED

    def _check_location(self, params: dict[str, str]) -> None:
        if params.get("project", self.project) != self.project:
            raise not_found(f"projects/{params['project']}")
        if "region" in params and params["region"] not in REGIONS:
            raise not_found(f"projects/{self.project}/regions/{params['region']}")
        if "zone" in params and params["zone"] not in ZONES:
            raise not_found(f"projects/{self.project}/zones/{params['zone']}")

    def _later(self, seconds: float, work: Callable[[], None]) -> None:
        """Run work under the lock after a while, unless the fake was reset meanwhile."""
        generation = self.generation

        def run() -> None:
            with self.lock:
                self.timers.discard(timer)
                if generation == self.generation:
                    work()
                    self.changed.notify_all()

        timer = threading.Timer(seconds, run)
        timer.daemon = True
        self.timers.add(timer)
        timer.start()

    def _link(self, path: str, project: str | None = None) -> str:
        return f"{self.url}/compute/v1/projects/{project or self.project}/{path}"

    def _key_of(self, link: str) -> str:
        """ "{url}/compute/v1/projects/p/zones/z/instances/x" → "zones/z/instances/x"."""
        return link.removeprefix(self._link(""))

    def _relative(self, where: str | Body) -> str:
        """ "projects/p/global/networks/x", of a key or a resource."""
        key = self._key_of(where["selfLink"]) if isinstance(where, dict) else where
        return f"projects/{self.project}/{key}"

    def _key(self, params: dict[str, str], collection: str) -> str:
        return f"{self._scope(params)}/{collection}/{params['name']}"

    def _get(self, collection: str, key: str) -> Body:
        if key not in self.resources[collection]:
            raise not_found(self._relative(key))
        return self.resources[collection][key]

    @staticmethod
    def _scope(params: dict[str, str]) -> str:
        if "zone" in params:
            return f"zones/{params['zone']}"
        if "region" in params:
            return f"regions/{params['region']}"
        return "global"

    def _resolve(self, field_name: str, value: Any, collection: str) -> str:
        """The key ("global/networks/x") of the existing resource a URL or partial URL names."""
        match = REFERENCE.fullmatch(value) if isinstance(value, str) else None
        path = match and (match["path"] or match["bare"])
        scope = COLLECTIONS[collection].scope
        shape = "global" if scope == "global" else scope + "/[^/]+"
        if not match or not path or not re.fullmatch(rf"{shape}/{collection}/[^/]+", path):
            raise invalid_field(field_name, value, "The URL is malformed.")
        if match["project"] not in (None, self.project):
            raise not_found(f"projects/{match['project']}")
        self._get(collection, path)
        return path

    @staticmethod
    def _check_name(value: Any, field_name: str = "resource.name") -> str:
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise invalid_field(field_name, value or "", f"Must match regex '{NAME.pattern}'")
        return value

    def _new_resource(self, collection: str, scope: str, body: Body) -> tuple[str, Body]:
        """Check a new resource's name, required fields and references; add the standard fields."""
        spec = COLLECTIONS[collection]
        name = self._check_name(body.get("name"))
        key = f"{scope}/{collection}/{name}"
        if key in self.resources[collection]:
            raise already_exists(self._relative(key))
        for required in spec.required:
            if body.get(required) in (None, "", [], {}):
                raise invalid(f"Required field 'resource.{required}' not specified")
        for reference, target in spec.references:
            body[reference] = self._link(
                self._resolve(f"resource.{reference}", body[reference], target)
            )
        body.update(kind=spec.kind, id=new_id(), creationTimestamp=now(), selfLink=self._link(key))
        if scope != "global":
            body[scope.split("/")[0].removesuffix("s")] = self._link(scope)  # "region" or "zone"
        return key, body

    def _in_use(self, body: Body) -> OperationError | None:
        """Why a resource cannot go yet: another one names it (network, template, target...)."""
        for items in self.resources.values():
            for other in items.values():
                named = {other.get(name) for name in ("network", "instanceTemplate", "target")}
                for nic in other.get("networkInterfaces", []):
                    named |= {nic["network"], nic["subnetwork"]}
                if body["selfLink"] in named:
                    return OperationError(
                        "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
                        f"The {body['kind'].split('#')[1]} resource '{self._relative(body)}' "
                        f"is already being used by '{self._relative(other)}'",
                    )
        return None

    # ---- operations ---------------------------------------------------------------------------
    def _operation(self, kind: str, target_link: str, scope: str) -> Body:
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}"
        operation = {
            "kind": "compute#operation",
            "id": new_id(),
            "name": name,
            "operationType": kind,
            "targetLink": target_link,
            "status": "RUNNING",
            "progress": 0,
            "insertTime": now(),
            "startTime": now(),
            "selfLink": self._link(f"{scope}/operations/{name}"),
        }
        if scope != "global":
            operation[scope.split("/")[0].removesuffix("s")] = self._link(scope)
        self.operations[name] = operation
        return operation

    def _finish(self, operation: Body | None, error: OperationError | None) -> None:
        if operation is None:
            return
        operation.update(status="DONE", progress=100, endTime=now())
        if error:
            operation["error"] = {"errors": [{"code": error.code, "message": error.message}]}
            operation["httpErrorStatusCode"] = error.http_status
            operation["httpErrorMessage"] = HTTPStatus(error.http_status).phrase.upper()
        self.changed.notify_all()

    def _in_steps(self, operation: Body | None, steps: list[Step]) -> None:
        """Run the steps `step_seconds` apart, then finish the operation (early, on an error)."""

        def advance(index: int) -> None:
            error = steps[index]()
            if error is None and index + 1 < len(steps):
                self._later(self.config["step_seconds"], lambda: advance(index + 1))
            else:
                self._finish(operation, error)

        if steps:
            self._later(self.config["step_seconds"], lambda: advance(0))
        else:
            self._finish(operation, None)

    def _find_operation(self, params: dict[str, str]) -> Body:
        key = f"{self._scope(params)}/operations/{params['operation']}"
        operation = self.operations.get(params["operation"])
        if not operation or operation["selfLink"] != self._link(key):  # asked in another scope
            raise not_found(self._relative(key))
        return operation

    def operation_get(self, request: Request, params: dict[str, str]) -> Body:
        return self._find_operation(params)

    def operation_wait(self, request: Request, params: dict[str, str]) -> Body:
        operation = self._find_operation(params)
        self.changed.wait_for(lambda: operation["status"] == "DONE", timeout=WAIT_SECONDS)
        return operation

    # ---- regions, zones, images ---------------------------------------------------------------
    def region_get(self, request: Request, params: dict[str, str]) -> Body:
        region = params["region"]
        zones = [self._link(f"zones/{region}-{letter}") for letter in REGIONS[region]]
        return {"kind": "compute#region", "id": str(1000 + list(REGIONS).index(region)),
                "name": region, "status": "UP", "zones": zones,
                "selfLink": self._link(f"regions/{region}")}  # fmt: skip

    def _zone(self, zone: str) -> Body:
        return {"kind": "compute#zone", "id": str(2000 + list(ZONES).index(zone)), "name": zone,
                "status": "UP", "region": self._link(f"regions/{ZONES[zone]}"),
                "selfLink": self._link(f"zones/{zone}")}  # fmt: skip

    def zone_list(self, request: Request, params: dict[str, str]) -> Body:
        zones = [self._zone(zone) for zone in ZONES]
        chosen = [zone for zone in zones if matches(request.query.get("filter", ""), zone)]
        return {"kind": "compute#zoneList", "items": chosen}

    def zone_get(self, request: Request, params: dict[str, str]) -> Body:
        return self._zone(params["zone"])

    def _image(self, project: str, name: str, *, family: bool) -> Body:
        """A public image of a family (debian-cloud's, ubuntu-os-cloud's), or by its name."""
        families = {(where, image): family for (where, family), image in IMAGES.items()}
        image = IMAGES.get((project, name), "") if family else name
        if (project, image) not in families:
            raise not_found(f"projects/{project}/global/images/{'family/' * family}{name}")
        return {"kind": "compute#image", "id": str(3000 + list(families).index((project, image))),
                "name": image, "family": families[project, image], "status": "READY",
                "selfLink": self._link(f"global/images/{image}", project)}  # fmt: skip

    def image_family(self, request: Request, params: dict[str, str]) -> Body:
        return self._image(params["image_project"], params["family"], family=True)

    def image_get(self, request: Request, params: dict[str, str]) -> Body:
        return self._image(params["image_project"], params["name"], family=False)

    # ---- simple collections -------------------------------------------------------------------
    def _collection(self, params: dict[str, str]) -> str:
        collection, scope = params["collection"], params["scope"].split("/")[0]
        if collection not in COLLECTIONS or COLLECTIONS[collection].scope != scope:
            raise ApiError(404, "notFound", f"The fake does not model {scope}/{collection}")
        return collection

    def _view(self, collection: str, key: str) -> Body:
        """A resource as GET shows it: a MIG with its current actions and whether it is stable."""
        body = copy.deepcopy(self.resources[collection][key])
        if collection == "instanceGroupManagers":
            actions = Counter(entry["currentAction"] for entry in self._managed_instances(key))
            body["currentActions"] = {
                action.lower(): actions[action] for action in ("NONE", "CREATING", "DELETING")
            }
            body["status"] = {"isStable": set(actions) <= {"NONE"}}
        return body

    def collection_list(self, request: Request, params: dict[str, str]) -> Body:
        collection, scope = self._collection(params), self._scope(params)
        items = [self._view(collection, key) for key in self.resources[collection]
                 if key.rsplit("/", 2)[0] == scope]  # fmt: skip
        return {
            "kind": COLLECTIONS[collection].kind + "List",
            "items": [body for body in items if matches(request.query.get("filter", ""), body)],
            "selfLink": self._link(f"{scope}/{collection}"),
        }

    def collection_get(self, request: Request, params: dict[str, str]) -> Body:
        collection = self._collection(params)
        key = self._key(params, collection)
        self._get(collection, key)
        return self._view(collection, key)

    def collection_insert(self, request: Request, params: dict[str, str]) -> Body:
        collection, scope = self._collection(params), self._scope(params)
        key, body = self._new_resource(collection, scope, request.json())
        if collection == "networks":
            body.setdefault("routingConfig", {"routingMode": "REGIONAL"})
        elif collection == "subnetworks":
            self._prepare_subnetwork(body)
        elif collection == "firewalls":
            body.setdefault("direction", "INGRESS")
            body.setdefault("priority", 1000)
        self.resources[collection][key] = body
        operation = self._operation("insert", body["selfLink"], scope)
        self._in_steps(operation, [lambda: None])
        return operation

    def collection_delete(self, request: Request, params: dict[str, str]) -> Body:
        """Deleted a step later, unless something uses it then (a network, a template...)."""
        collection = self._collection(params)
        key = self._key(params, collection)
        body = self._get(collection, key)
        operation = self._operation("delete", body["selfLink"], self._scope(params))

        def remove() -> OperationError | None:
            if error := self._in_use(body):
                return error
            self.resources[collection].pop(key, None)
            return None

        self._in_steps(operation, [remove])
        return operation

    def _prepare_subnetwork(self, body: Body) -> None:
        text = body["ipCidrRange"]
        try:
            cidr = ipaddress.IPv4Network(text)
        except ValueError:
            raise invalid_field("resource.ipCidrRange", text, "Invalid IPCidrRange.") from None
        if not 8 <= cidr.prefixlen <= 29:
            raise invalid_field("resource.ipCidrRange", text, "The prefix must be /8 to /29.")
        for other in self.resources["subnetworks"].values():
            same_network = other["network"] == body["network"]
            if same_network and cidr.overlaps(ipaddress.IPv4Network(other["ipCidrRange"])):
                raise invalid(
                    f"Invalid IPCidrRange: {text} conflicts with existing subnetwork "
                    f"'{other['name']}' in region '{short(other['region'])}'."
                )
        body.setdefault("privateIpGoogleAccess", False)
        body.update(gatewayAddress=str(cidr.network_address + 1), fingerprint=fingerprint())

    # ---- instances ----------------------------------------------------------------------------
    def _create_instance(
        self, zone: str, body: Body, properties: Body, group: str | None = None
    ) -> tuple[str, OperationError | None]:
        """Check and store a new PROVISIONING instance, the template's properties under its own
        fields; over the instance quota, store nothing and return the operation's error."""
        instance = copy.deepcopy(properties) | body
        instance["labels"] = properties.get("labels", {}) | body.get("labels", {})
        key, instance = self._new_resource("instances", f"zones/{zone}", instance)
        machine_type = short(str(instance.get("machineType") or ""))
        self._check_name(machine_type, "resource.machineType")
        instance["machineType"] = self._link(f"zones/{zone}/machineTypes/{machine_type}")
        instance["disks"] = self._disks(zone, instance["name"], instance.get("disks") or [])
        instance["networkInterfaces"] = self._interfaces(zone, instance.get("networkInterfaces"))
        if "metadata" in instance:
            instance["metadata"] |= {"kind": "compute#metadata", "fingerprint": fingerprint()}
        instance.update(status="PROVISIONING", fingerprint=fingerprint())
        quota = self.config["instance_quota"]
        if sum(not machine.deleting for machine in self.machines.values()) >= quota:
            message = f"Quota 'INSTANCES' exceeded. Limit: {quota} in region {ZONES[zone]}."
            return key, OperationError("QUOTA_EXCEEDED", message, 403)
        self.resources["instances"][key] = instance
        self.machines[key] = Machine(group=group)
        return key, None

    def _disks(self, zone: str, name: str, disks: list[Body]) -> list[Body]:
        if not disks:
            raise invalid_field("resource.disks", "", "No disks are specified.")
        attached = []
        for index, disk in enumerate(disks):
            params = disk.pop("initializeParams", None) or {}
            if image := params.get("sourceImage"):
                match = IMAGE_URL.fullmatch(image)
                if not match:
                    raise invalid_field(f"resource.disks[{index}]", image, "Bad sourceImage.")
                self._image(match["project"], match["name"], family=bool(match["family"]))
            source = params.get("diskName") or (name if index == 0 else f"{name}-{index}")
            attached.append(
                {"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE",
                 "boot": index == 0, "deviceName": f"persistent-disk-{index}"}
                | disk
                | {"index": index, "diskSizeGb": str(params.get("diskSizeGb", 10)),
                   "source": self._link(f"zones/{zone}/disks/{source}")}
            )  # fmt: skip
        return attached

    def _interfaces(self, zone: str, interfaces: list[Body] | None) -> list[Body]:
        """Each interface on its subnetwork, with the next free address of its range (the
        network's, the gateway's and the broadcast address are never leased)."""
        if not interfaces:
            raise invalid_field("resource.networkInterfaces", "", "No interfaces are specified.")
        taken = {nic["networkIP"] for instance in self.resources["instances"].values()
                 for nic in instance["networkInterfaces"]}  # fmt: skip
        attached = []
        for index, nic in enumerate(interfaces):
            where = f"resource.networkInterfaces[{index}].subnetwork"
            if not nic.get("subnetwork"):  # the fake makes no auto-mode subnetworks
                raise invalid_field(where, "", "Subnetwork should be specified.")
            subnet_key = self._resolve(where, nic["subnetwork"], "subnetworks")
            subnet = self.resources["subnetworks"][subnet_key]
            if short(subnet["region"]) != ZONES[zone]:
                raise invalid_field(where, nic["subnetwork"], f"Use one in {ZONES[zone]}.")
            hosts = ipaddress.IPv4Network(subnet["ipCidrRange"]).hosts()
            free = (str(ip) for ip in hosts if str(ip) not in taken | {subnet["gatewayAddress"]})
            address = nic.get("networkIP") or next(free, None)
            if address is None:
                raise invalid(f"IP_SPACE_EXHAUSTED: no address left in {subnet['ipCidrRange']}.")
            taken.add(address)
            attached.append(
                nic | {"kind": "compute#networkInterface", "name": f"nic{index}",
                       "network": subnet["network"], "subnetwork": subnet["selfLink"],
                       "networkIP": address, "fingerprint": fingerprint()}
            )  # fmt: skip
        return attached

    def _power_steps(self, key: str, statuses: list[str]) -> list[Step]:
        """Steps that move an instance through these statuses; a later power change makes them
        stand down (their operation still finishes)."""
        machine = self.machines[key]
        machine.transition += 1
        transition = machine.transition

        def to(status: str) -> Step:
            def step() -> None:
                if self.machines.get(key) is machine and machine.transition == transition:
                    self._set_status(key, status)

            return step

        return [to(status) for status in statuses]

    def _set_status(self, key: str, status: str) -> None:
        if status == DELETED:
            del self.resources["instances"][key], self.machines[key]
            return
        instance = self.resources["instances"][key]
        instance["status"] = status
        if status == "RUNNING":
            instance["lastStartTimestamp"] = now()
            self._schedule_bootstrap(key)

    def _schedule_bootstrap(self, key: str) -> None:
        """A boot whose user-data reports to the guest attribute `zopday/bootstrap` (and whose
        metadata enables guest attributes) sets it a while later, as cloud-init's curl would."""
        instance, machine = self.resources["instances"][key], self.machines[key]
        items = instance.get("metadata", {}).get("items", [])
        metadata = {item.get("key"): str(item.get("value", "")) for item in items}
        enabled = metadata.get("enable-guest-attributes", "").upper() == "TRUE"
        if not enabled or BOOTSTRAP_MARKER not in metadata.get("user-data", ""):
            return
        transition = machine.transition

        def report() -> None:
            this_boot = self.machines.get(key) is machine and machine.transition == transition
            if this_boot and not self.config["bootstrap_fails"]:
                machine.guest[BOOTSTRAP_ATTRIBUTE] = "ready"

        self._later(self.config["bootstrap_seconds"], report)

    def _delete_steps(self, key: str) -> list[Step]:
        self.machines[key].deleting = True
        self._set_status(key, "STOPPING")
        return self._power_steps(key, [DELETED])

    def instance_insert(self, request: Request, params: dict[str, str]) -> Body:
        """PROVISIONING → STAGING → RUNNING; with ?sourceInstanceTemplate= on its properties."""
        properties: Body = {}
        if template := request.query.get("sourceInstanceTemplate"):
            template_key = self._resolve("sourceInstanceTemplate", template, "instanceTemplates")
            properties = self.resources["instanceTemplates"][template_key]["properties"]
        key, error = self._create_instance(params["zone"], request.json(), properties)
        operation = self._operation("insert", self._link(key), self._scope(params))
        boot = self._power_steps(key, ["STAGING", "RUNNING"]) if not error else [lambda: error]
        self._in_steps(operation, boot)
        return operation

    def instance_delete(self, request: Request, params: dict[str, str]) -> Body:
        key = self._key(params, "instances")
        self._get("instances", key)
        operation = self._operation("delete", self._link(key), self._scope(params))
        self._in_steps(operation, self._delete_steps(key))
        return operation

    def instance_power(self, request: Request, params: dict[str, str]) -> Body:
        """start (TERMINATED → STAGING → RUNNING), stop (→ STOPPING → TERMINATED), reset (a new
        boot, staying RUNNING). A start of a running instance is a no-op, DONE at once."""
        key, action = self._key(params, "instances"), params["action"]
        status, machine = self._get("instances", key)["status"], self.machines[key]
        stopping = action == "start" and status == "STOPPING"
        if machine.deleting or stopping or (action == "reset" and status != "RUNNING"):
            raise not_ready(self._relative(key))
        steps: list[Step] = []
        if action == "start" and status == "TERMINATED":
            self._set_status(key, "STAGING")
            steps = self._power_steps(key, ["RUNNING"])
        elif action == "stop" and status != "TERMINATED":
            self._set_status(key, "STOPPING")
            steps = self._power_steps(key, ["TERMINATED"])
        elif action == "reset":
            machine.resets += 1
            steps = self._power_steps(key, ["RUNNING"])
        operation = self._operation(action, self._link(key), self._scope(params))
        self._in_steps(operation, steps)
        return operation

    def instance_guest_attributes(self, request: Request, params: dict[str, str]) -> Body:
        key = self._key(params, "instances")
        self._get("instances", key)
        query_path = request.query.get("queryPath", "")
        items = [
            {"namespace": path.split("/")[0], "key": path.split("/")[1], "value": value}
            for path, value in sorted(self.machines[key].guest.items())
            if path.startswith(query_path)
        ]
        if not items:
            raise ApiError(404, "notFound", f"The resource 'guestAttributes/{query_path}' of "
                           "type 'Guest Attribute' was not found.")  # fmt: skip
        return {"kind": "compute#guestAttributes", "queryPath": query_path,
                "queryValue": {"items": items}}  # fmt: skip

    # ---- managed instance groups --------------------------------------------------------------
    def _members(self, group_key: str, *, deleting: bool = True) -> list[str]:
        return [key for key, machine in self.machines.items()
                if machine.group == group_key and (deleting or not machine.deleting)]  # fmt: skip

    def _managed_instances(self, group_key: str) -> list[Body]:
        entries = []
        for key in self._members(group_key):
            instance = self.resources["instances"][key]
            action = "CREATING" if instance["status"] in BOOTING else "NONE"
            entries.append(
                {"instance": instance["selfLink"], "id": instance["id"],
                 "instanceStatus": instance["status"],
                 "currentAction": "DELETING" if self.machines[key].deleting else action}
            )  # fmt: skip
        return entries + copy.deepcopy(self.group_failures.get(group_key, []))

    def _group_grow(self, group_key: str, count: int) -> None:
        """Make instances from the template in the group's least used zones. One that the quota
        (or anything else) refuses stays an entry CREATING, with the error as its last attempt."""
        group = self.resources["instanceGroupManagers"][group_key]
        template = self.resources["instanceTemplates"][self._key_of(group["instanceTemplate"])]
        zones = [short(entry["zone"]) for entry in group["distributionPolicy"]["zones"]]
        for _ in range(count):
            failed = [self._key_of(entry["instance"]) for entry in self.group_failures[group_key]]
            used = Counter(key.split("/")[1] for key in self._members(group_key) + failed)
            zone = min(zones, key=lambda candidate: used[candidate])
            suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in "1234")
            name = f"{group['baseInstanceName']}-{suffix}"
            key, properties = f"zones/{zone}/instances/{name}", template["properties"]
            try:
                key, error = self._create_instance(zone, {"name": name}, properties, group_key)
            except ApiError as refusal:  # the template's subnetwork is full, say
                error = OperationError(refusal.reason, refusal.message)
            if error is None:
                self._in_steps(None, self._power_steps(key, ["STAGING", "RUNNING"]))
                continue
            errors = {"errors": [{"code": error.code, "message": error.message}]}
            self.group_failures[group_key].append(
                {
                    "instance": self._link(key),
                    "currentAction": "CREATING",
                    "lastAttempt": {"errors": errors},
                }
            )

    def _group_shrink(self, group_key: str, count: int) -> None:
        """Forget the entries that failed to create first, then delete the newest instances."""
        failures = self.group_failures[group_key]
        while count and failures:
            failures.pop()
            count -= 1
        for key in self._members(group_key, deleting=False)[::-1][:count]:
            self._in_steps(None, self._delete_steps(key))

    def group_insert(self, request: Request, params: dict[str, str]) -> Body:
        """The group, then its instances (the operation does not wait for them to run)."""
        region = params["region"]
        key, group = self._new_resource(
            "instanceGroupManagers", f"regions/{region}", request.json()
        )
        chosen = group.get("distributionPolicy", {}).get("zones", [])
        zones = [short(entry.get("zone", "")) for entry in chosen] or [
            f"{region}-{letter}" for letter in REGIONS[region]
        ]
        if any(ZONES.get(zone) != region for zone in zones):
            raise invalid_field("resource.distributionPolicy.zones", zones, f"Not all in {region}.")
        group["distributionPolicy"] = {"zones": [{"zone": self._link(f"zones/{z}")} for z in zones]}
        group.update(targetSize=int(group.get("targetSize", 0)), fingerprint=fingerprint())
        self.resources["instanceGroupManagers"][key], self.group_failures[key] = group, []
        self._group_grow(key, group["targetSize"])
        operation = self._operation("insert", group["selfLink"], self._scope(params))
        self._in_steps(operation, [lambda: None])
        return operation

    def group_resize(self, request: Request, params: dict[str, str]) -> Body:
        key = self._key(params, "instanceGroupManagers")
        group = self._get("instanceGroupManagers", key)
        size = request.query.get("size", "")
        if not size.isdigit():
            raise invalid_field("size", size, "Must be a non-negative integer.")
        current = len(self._members(key, deleting=False)) + len(self.group_failures[key])
        group["targetSize"] = int(size)
        if int(size) > current:
            self._group_grow(key, int(size) - current)
        else:
            self._group_shrink(key, current - int(size))
        operation = self._operation("resize", group["selfLink"], self._scope(params))
        self._in_steps(operation, [lambda: None])
        return operation

    def group_managed_instances(self, request: Request, params: dict[str, str]) -> Body:
        key = self._key(params, "instanceGroupManagers")
        self._get("instanceGroupManagers", key)
        return {"managedInstances": self._managed_instances(key)}

    def group_delete(self, request: Request, params: dict[str, str]) -> Body:
        """Delete the group's instances, then (a step after they are gone) the group itself."""
        key = self._key(params, "instanceGroupManagers")
        group = self._get("instanceGroupManagers", key)
        operation = self._operation("delete", group["selfLink"], self._scope(params))
        if error := self._in_use(group):  # an autoscaler targets it
            self._in_steps(operation, [lambda: error])
            return operation
        self._group_shrink(key, len(self._members(key)) + len(self.group_failures[key]))

        def remove() -> None:
            self.resources["instanceGroupManagers"].pop(key, None)
            self.group_failures.pop(key, None)

        self._in_steps(operation, [lambda: None, remove])
        return operation

    # ---- IAM service accounts -----------------------------------------------------------------
    def _iam_project(self, params: dict[str, str], *, any_allowed: bool = False) -> None:
        if params["iam_project"] not in {self.project, "-" if any_allowed else self.project}:
            raise iam_error(404, "NOT_FOUND", f"Project '{params['iam_project']}' not found.")

    def account_create(self, request: Request, params: dict[str, str]) -> Body:
        self._iam_project(params)
        body = request.json()
        account_id = str(body.get("accountId", ""))
        if not ACCOUNT_ID.fullmatch(account_id):
            why = f"Invalid account ID '{account_id}': it must match {ACCOUNT_ID.pattern}."
            raise iam_error(400, "INVALID_ARGUMENT", why)
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        if email in self.accounts:
            why = f"Service account {account_id} already exists within project projects/{self.project}."
            raise iam_error(409, "ALREADY_EXISTS", why)
        unique_id = str(10**20 + secrets.randbelow(9 * 10**20))
        self.accounts[email] = {
            "name": f"projects/{self.project}/serviceAccounts/{email}",
            "projectId": self.project,
            "uniqueId": unique_id,
            "email": email,
            "displayName": (body.get("serviceAccount") or {}).get("displayName", ""),
            "oauth2ClientId": unique_id,
        }
        return self.accounts[email]

    def _account(self, params: dict[str, str]) -> Body:
        self._iam_project(params, any_allowed=True)
        if params["email"] not in self.accounts:
            raise iam_error(404, "NOT_FOUND", "Unknown service account")
        return self.accounts[params["email"]]

    def account_get(self, request: Request, params: dict[str, str]) -> Body:
        return self._account(params)

    def account_delete(self, request: Request, params: dict[str, str]) -> Body:
        del self.accounts[self._account(params)["email"]]
        return {}

    # ---- OAuth2 and control -------------------------------------------------------------------
    def token(self, request: Request, params: dict[str, str]) -> Body:
        """The JWT-bearer grant of a service account key: the assertion is read, not verified."""
        form = dict(parse_qsl(request.raw.decode()))
        if form.get("grant_type") != JWT_BEARER:
            raise oauth_error(
                "unsupported_grant_type", f"Invalid grant_type: {form.get('grant_type')}"
            )
        claims = jwt_claims(form.get("assertion", ""))
        if not claims or not claims.get("iss"):
            raise oauth_error("invalid_grant", "Invalid JWT: no issuer.")
        if claims["iss"] in self.revoked:
            raise oauth_error("invalid_grant", "Invalid JWT Signature.")
        access_token = f"fake-{secrets.token_urlsafe(24)}"
        self.tokens[access_token] = claims["iss"]
        return {"access_token": access_token, "expires_in": 3600, "token_type": "Bearer"}

    def control_reset(self, request: Request, params: dict[str, str]) -> Body:
        self.reset()
        return {}

    def control_configure(self, request: Request, params: dict[str, str]) -> Body:
        try:
            self.configure(**request.json())
        except (ValueError, TypeError) as error:
            raise invalid(str(error)) from None
        return self.config

    def control_state(self, request: Request, params: dict[str, str]) -> Body:
        return self.state()


def service_account_key(fake: FakeGce, *, email: str | None = None) -> dict[str, str]:
    """A real service account key (a new RSA 2048 key) whose token_uri is the fake's."""
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return {
        "type": "service_account",
        "project_id": fake.project,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem.decode(),
        "client_email": email or f"zopday@{fake.project}.iam.gserviceaccount.com",
        "client_id": str(10**20 + secrets.randbelow(9 * 10**20)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": f"{fake.url}/token",
        "universe_domain": "googleapis.com",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the Compute Engine fake until killed.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--project", default="zopday-sandbox")
    arguments = parser.parse_args()
    fake = FakeGce(arguments.project, host=arguments.host, port=arguments.port)
    print(fake.url, flush=True)
    try:
        fake.thread.join()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
