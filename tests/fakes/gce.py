"""A local fake of Google Compute Engine v1 (REST), three IAM service-account calls, Cloud DNS v1
and the OAuth2 token endpoint, so the GCP provider is tested with the real google-cloud-compute
SDK and real service-account credentials against loopback.

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

A global external Application Load Balancer is modelled as far as its resources go: addresses,
HTTP health checks, instance groups (unmanaged ones and each regional MIG's own), backend
services, URL maps, target HTTP proxies and forwarding rules, each refused deletion while
another names it. A backend service's getHealth says HEALTHY for a RUNNING instance whose
bootstrap reported "ready" when the health check's port is `serving_port` (where the simulated
NGINX listens). Cloud DNS (`/dns/v1/...`) answers at once: managed zones and record set changes.

Another process (a Celery worker) shares the fake through `POST /_fake/reset`, `POST
/_fake/configure` and `GET /_fake/state`; `python -m tests.fakes.gce --port 0` serves it
standalone and prints its URL on the first line.

Where it stops: one project (plus three public image families); custom-mode networks
only (an interface must name its subnetwork); no pagination; a MIG never recreates instances;
HTTP health checks and target HTTP proxies only, and getHealth does not look for a firewall
rule letting the checkers in; public DNS zones only, without DNSSEC or SOA serials that move.
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
# Machine types (vCPUs, memory MB) and the zones that offer them: every zone but where a type is
# listed in NOT_OFFERED (c3 is not in us-central1-f, nor anywhere in europe-west1 or asia-northeast1).
MACHINE_TYPES = {
    "e2-micro": (2, 1024), "e2-small": (2, 2048), "e2-medium": (2, 4096),
    "e2-standard-2": (2, 8192), "e2-standard-4": (4, 16384),
    "n2-standard-2": (2, 8192), "n2-standard-4": (4, 16384), "c3-standard-4": (4, 16384),
}  # fmt: skip
NOT_OFFERED = {
    "c3-standard-4": {"us-central1-f", "europe-west1-b", "europe-west1-c", "europe-west1-d",
                      "asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c"},
}  # fmt: skip
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
    "serving_port": 80,  # where a bootstrapped instance's service (NGINX) answers health checks
    "serial_keep_bytes": 1024 * 1024,  # the serial output GCE keeps of each instance: the last MiB
    "serial_denied": False,  # getSerialPortOutput refused as IAM does without the permission
}
# What a booting instance prints on its serial port before the guest's own output.
BOOT_LINES = (
    "SeaBIOS (version 1.8.2-google)\r\nBooting from Hard Disk 0...\r\n"
    "[    0.000000] Linux version 6.1.0-28-cloud-amd64\r\n"
    "{name} login: \r\n"
)
SOA_TIMES = "21600 3600 259200 300"  # refresh, retry, expire, negative caching TTL
RECORD_TYPES = {"A", "AAAA", "CAA", "CNAME", "MX", "NS", "PTR", "SOA", "SPF", "SRV", "TXT"}
DNS_NAME = re.compile(r"(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+", re.IGNORECASE)
# fields a PATCH cannot change (the name must stay as it is, the fingerprint current)
FIXED = {"kind", "id", "name", "selfLink", "creationTimestamp", "fingerprint", "region", "zone"}


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

    scope: str  # "global", "regions", "zones" or, for instance groups, "zones regions"
    kind: str
    required: tuple[str, ...] = ()
    # (field, collection of the resource it names); "a[]" is each URL of a list, "a[].b" each
    # item's field
    references: tuple[tuple[str, str], ...] = ()
    patchable: bool = False  # PATCH merges the body into the resource (JSON merge patch)


NETWORK = (("network", "networks"),)
SERVICE = "backendServices"
COLLECTIONS = {
    "networks": Collection("global", "compute#network"),
    "firewalls": Collection("global", "compute#firewall", ("network",), NETWORK, patchable=True),
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
    "addresses": Collection("global", "compute#address"),
    "healthChecks": Collection("global", "compute#healthCheck", ("type",), patchable=True),
    "instanceGroups": Collection("zones regions", "compute#instanceGroup", (), NETWORK),
    SERVICE: Collection(
        "global",
        "compute#backendService",
        references=(("healthChecks[]", "healthChecks"), ("backends[].group", "instanceGroups")),
        patchable=True,
    ),
    "urlMaps": Collection(
        "global",
        "compute#urlMap",
        ("defaultService",),
        (
            ("defaultService", SERVICE),
            ("pathMatchers[].defaultService", SERVICE),
            ("pathMatchers[].pathRules[].service", SERVICE),
        ),
    ),
    "targetHttpProxies": Collection(
        "global", "compute#targetHttpProxy", ("urlMap",), (("urlMap", "urlMaps"),)
    ),
    "forwardingRules": Collection(
        "global",
        "compute#forwardingRule",
        ("target", "portRange"),
        (("target", "targetHttpProxies"),),
    ),
}
READ_ONLY = {("regions", "instanceGroups")}  # a regional MIG makes and deletes its own group


@dataclass
class Machine:
    """What the fake knows of an instance beyond its REST body."""

    transition: int = 0  # bumped by each power change: timers of an older one stand down
    resets: int = 0
    deleting: bool = False
    group: str | None = None  # key of the MIG that made it
    guest: dict[str, str] = field(default_factory=dict)  # "namespace/key" → value
    serial: bytearray = field(default_factory=bytearray)  # port 1's output, its kept tail
    serial_next: int = 0  # how many bytes the guest printed in all: the next byte's offset


@dataclass
class ManagedZone:
    """A Cloud DNS zone: its REST body, its record sets, the id of its last change."""

    body: Body
    rrsets: list[Body]
    changes: int = 0  # the zone's creation is change 0


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


def values_at(body: Any, path: str) -> list[Any]:
    """What a reference path names in a body: "network", "healthChecks[]", "backends[].group"."""
    found = [body]
    for part in path.split("."):
        name = part.removesuffix("[]")
        found = [item.get(name) for item in found if isinstance(item, dict)]
        if part.endswith("[]"):
            found = [each for item in found if isinstance(item, list) for each in item]
    return [item for item in found if item is not None]


def merge_patch(target: Body, patch: Body) -> Body:
    """RFC 7396, as Compute's PATCH: objects merge, anything else (a list) replaces, null removes."""
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        elif isinstance(value, dict) and isinstance(target.get(name), dict):
            merge_patch(target[name], value)
        else:
            target[name] = copy.deepcopy(value)
    return target


def snake(kind: str) -> str:
    """ "compute#backendService" → "backend_service", as Compute's in-use messages name it."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", kind.split("#")[1]).lower()


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
ZONE_GROUPS = COMPUTE + r"/(?P<scope>zones/(?P<zone>[^/]+))/instanceGroups" + NAMED
ANY_GROUPS = (
    COMPUTE + r"/(?P<scope>zones/(?P<zone>[^/]+)|regions/(?P<region>[^/]+))/instanceGroups" + NAMED
)
DNS_ZONES = r"/dns/v1/projects/(?P<project>[^/]+)/managedZones"
DNS_ZONE = DNS_ZONES + r"/(?P<managed_zone>[^/]+)"
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
        ("GET", COMPUTE + r"/aggregated/machineTypes", "machine_types_aggregated"),
        ("GET", COMPUTE + r"/aggregated/instances", "instances_aggregated"),
        ("GET", SCOPED + r"/operations/(?P<operation>[^/]+)", "operation_get"),
        ("POST", SCOPED + r"/operations/(?P<operation>[^/]+)/wait", "operation_wait"),
        ("POST", INSTANCES, "instance_insert"),
        ("DELETE", INSTANCES + NAMED, "instance_delete"),
        ("POST", INSTANCES + NAMED + r"/(?P<action>start|stop|reset)", "instance_power"),
        ("GET", INSTANCES + NAMED + r"/getGuestAttributes", "instance_guest_attributes"),
        ("GET", INSTANCES + NAMED + r"/serialPort", "instance_serial_port"),
        ("POST", GROUPS, "group_insert"),
        ("POST", GROUPS + NAMED + r"/resize", "group_resize"),
        ("POST", GROUPS + NAMED + r"/listManagedInstances", "group_managed_instances"),
        ("DELETE", GROUPS + NAMED, "group_delete"),
        ("POST", ZONE_GROUPS + r"/(?P<action>addInstances|removeInstances)", "igroup_members"),
        ("POST", ANY_GROUPS + r"/listInstances", "igroup_list_instances"),
        ("POST", ANY_GROUPS + r"/setNamedPorts", "igroup_named_ports"),
        ("POST", COMPUTE + r"/global/backendServices" + NAMED + r"/getHealth", "backend_health"),
        ("GET", DNS_ZONES, "dns_zone_list"),
        ("POST", DNS_ZONES, "dns_zone_create"),
        ("GET", DNS_ZONE, "dns_zone_get"),
        ("DELETE", DNS_ZONE, "dns_zone_delete"),
        ("GET", DNS_ZONE + r"/rrsets", "dns_rrsets"),
        ("POST", DNS_ZONE + r"/changes", "dns_change"),
        ("GET", SCOPED + r"/(?P<collection>\w+)", "collection_list"),
        ("GET", SCOPED + r"/(?P<collection>\w+)" + NAMED, "collection_get"),
        ("POST", SCOPED + r"/(?P<collection>\w+)", "collection_insert"),
        ("DELETE", SCOPED + r"/(?P<collection>\w+)" + NAMED, "collection_delete"),
        ("PATCH", SCOPED + r"/(?P<collection>\w+)" + NAMED, "collection_patch"),
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
        # The headers and the body in one write: two small writes on a kept-alive connection
        # meet the client's delayed ACK, and a call then takes 40 ms more.
        self._headers_buffer.append(b"\r\n" + data)
        self.flush_headers()

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
        self.calls: Counter[str] = Counter()  # requests served, by handler name
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
        """Change some of step_seconds, bootstrap_seconds, bootstrap_fails, instance_quota,
        serving_port."""
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
        the fake's `resets` and `guestAttributes`, an instance group its `members`' names), then
        managedZones (each with its `rrsets`), operations, serviceAccounts, config and revoked."""
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
            for key in self.resources["instanceGroups"]:
                members = [short(member) for member in self._group_members(key)]
                snapshot["instanceGroups"][short(key)]["members"] = members
            snapshot.update(
                managedZones={
                    name: zone.body | {"rrsets": zone.rrsets} for name, zone in self.dns.items()
                },
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

    def append_serial(self, name: str, text: str) -> None:
        """The instance's guest prints text on its first serial port (GCE keeps the last MiB)."""
        with self.lock:
            key = next(key for key in self.machines if short(key) == name)
            self._print_serial(key, text)

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
        self.group_instances: dict[str, list[str]] = {}  # unmanaged group key → instance keys
        self.dns: dict[str, ManagedZone] = {}  # by zone name
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
                self.calls[handler] += 1
                self._check_location(params)
                answer = getattr(self, handler)(Request(query, raw), params)
                if answer is None:  # Cloud DNS's delete
                    return 204, b""
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
        scopes = COLLECTIONS[collection].scope.split()
        shape = "|".join("global" if scope == "global" else scope + "/[^/]+" for scope in scopes)
        if not match or not path or not re.fullmatch(rf"(?:{shape})/{collection}/[^/]+", path):
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

    def _link_references(self, body: Any, path: str, collection: str, where: str) -> None:
        """Replace each URL at a reference path ("network", "healthChecks[]", "backends[].group")
        by the full link of the existing resource it names. One not given is left alone."""
        head, _, rest = path.partition(".")
        name = head.removesuffix("[]")
        if not isinstance(body, dict) or body.get(name) in (None, "", []):
            return
        where = f"{where}.{name}"
        if head.endswith("[]"):
            items = body[name]
            if not isinstance(items, list):
                raise invalid_field(where, items, "A list is expected.")
            for index, item in enumerate(items):
                if rest:
                    self._link_references(item, rest, collection, f"{where}[{index}]")
                else:
                    items[index] = self._link(self._resolve(f"{where}[{index}]", item, collection))
        elif rest:
            self._link_references(body[name], rest, collection, where)
        else:
            body[name] = self._link(self._resolve(where, body[name], collection))

    def _check_fields(self, collection: str, body: Body) -> None:
        """The required fields are there; the references name existing resources (made links)."""
        spec = COLLECTIONS[collection]
        for required in spec.required:
            if body.get(required) in (None, "", [], {}):
                raise invalid(f"Required field 'resource.{required}' not specified")
        for path, target in spec.references:
            self._link_references(body, path, target, "resource")

    def _new_resource(self, collection: str, scope: str, body: Body) -> tuple[str, Body]:
        """Check a new resource's name, required fields and references; add the standard fields."""
        spec = COLLECTIONS[collection]
        name = self._check_name(body.get("name"))
        key = f"{scope}/{collection}/{name}"
        if key in self.resources[collection]:
            raise already_exists(self._relative(key))
        self._check_fields(collection, body)
        body.update(kind=spec.kind, id=new_id(), creationTimestamp=now(), selfLink=self._link(key))
        if scope != "global":
            body[scope.split("/")[0].removesuffix("s")] = self._link(scope)  # "region" or "zone"
        return key, body

    def _named(self, collection: str, body: Body) -> set[str]:
        """The links of the resources this one uses: its references, its interfaces' network and
        subnetwork, a forwarding rule's reserved address."""
        named = {link for path, _ in COLLECTIONS[collection].references
                 for link in values_at(body, path)}  # fmt: skip
        for nic in body.get("networkInterfaces", []):
            named |= {nic["network"], nic["subnetwork"]}
        if collection == "forwardingRules":
            named |= {address["selfLink"] for address in self.resources["addresses"].values()
                      if address["address"] == body["IPAddress"]}  # fmt: skip
        return named

    def _in_use(self, body: Body) -> OperationError | None:
        """Why a resource cannot go yet: another one names it (network, template, target...)."""
        for collection, items in self.resources.items():
            for other in items.values():
                if body["selfLink"] in self._named(collection, other):
                    return OperationError(
                        "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
                        f"The {snake(body['kind'])} resource '{self._relative(body)}' "
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

    def _machine_type(self, zone: str, name: str) -> Body:
        cpus, memory = MACHINE_TYPES[name]
        return {"kind": "compute#machineType", "id": str(4000 + list(MACHINE_TYPES).index(name)),
                "name": name, "guestCpus": cpus, "memoryMb": memory, "zone": zone,
                "selfLink": self._link(f"zones/{zone}/machineTypes/{name}")}  # fmt: skip

    def machine_types_aggregated(self, request: Request, params: dict[str, str]) -> Body:
        """Each zone's machine types that match the filter, keyed by "zones/<zone>"; a zone with
        none says so in a warning, as Compute does."""
        items: Body = {}
        for zone in ZONES:
            offered = [self._machine_type(zone, name) for name in MACHINE_TYPES
                       if zone not in NOT_OFFERED.get(name, ())]  # fmt: skip
            chosen = [kind for kind in offered if matches(request.query.get("filter", ""), kind)]
            items[f"zones/{zone}"] = (
                {"machineTypes": chosen} if chosen else
                {"warning": {"code": "NO_RESULTS_ON_PAGE",
                             "message": "There are no results for scope 'zones/" + zone
                                        + "' on this page."}}
            )  # fmt: skip
        return {"kind": "compute#machineTypeAggregatedList", "items": items}

    def instances_aggregated(self, request: Request, params: dict[str, str]) -> Body:
        """Every zone's instances that match the filter, keyed by "zones/<zone>", in one page."""
        items: Body = {}
        for key in self.resources["instances"]:
            body = self._view("instances", key)
            if matches(request.query.get("filter", ""), body):
                scope = key.rsplit("/", 2)[0]
                items.setdefault(scope, {"instances": []})["instances"].append(body)
        return {"kind": "compute#instanceAggregatedList", "items": items}

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
    def _collection(self, params: dict[str, str], *, writing: bool = False) -> str:
        collection, scope = params["collection"], params["scope"].split("/")[0]
        if collection not in COLLECTIONS or scope not in COLLECTIONS[collection].scope.split():
            raise ApiError(404, "notFound", f"The fake does not model {scope}/{collection}")
        if writing and (scope, collection) in READ_ONLY:
            why = f"{scope}/{collection} are made and deleted with their managed instance group"
            raise ApiError(404, "notFound", f"The fake does not model this method: {why}")
        return collection

    def _view(self, collection: str, key: str) -> Body:
        """A resource as GET shows it: a MIG with its current actions and whether it is stable,
        an address IN_USE (with its users) while a forwarding rule has it, a group's size."""
        body = copy.deepcopy(self.resources[collection][key])
        if collection == "instanceGroupManagers":
            actions = Counter(entry["currentAction"] for entry in self._managed_instances(key))
            body["currentActions"] = {
                action.lower(): actions[action] for action in ("NONE", "CREATING", "DELETING")
            }
            body["status"] = {"isStable": set(actions) <= {"NONE"}}
        elif collection == "addresses":  # IN_USE while a forwarding rule has it
            users = [rule["selfLink"] for rule in self.resources["forwardingRules"].values()
                     if rule["IPAddress"] == body["address"]]  # fmt: skip
            body["status"] = "IN_USE" if users else "RESERVED"
            if users:
                body["users"] = users
        elif collection == "instanceGroups":
            body["size"] = len(self._group_members(key))
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

    def _prepare(self, collection: str, body: Body) -> None:
        """Check a new or patched resource further and fill in what Compute does by default."""
        if collection == "networks":
            body.setdefault("routingConfig", {"routingMode": "REGIONAL"})
        elif collection == "subnetworks":
            self._prepare_subnetwork(body)
        elif collection == "firewalls":
            body.setdefault("direction", "INGRESS")
            body.setdefault("priority", 1000)
        elif collection == "addresses":
            self._prepare_address(body)
        elif collection == "healthChecks":
            self._prepare_health_check(body)
        elif collection == "instanceGroups":
            body["namedPorts"] = self._named_ports(body.get("namedPorts", []))
            body["fingerprint"] = fingerprint()
        elif collection == SERVICE:
            self._prepare_backend_service(body)
        elif collection == "forwardingRules":
            self._prepare_forwarding_rule(body)
        if collection in ("urlMaps", "targetHttpProxies"):
            body["fingerprint"] = fingerprint()

    def collection_insert(self, request: Request, params: dict[str, str]) -> Body:
        collection, scope = self._collection(params, writing=True), self._scope(params)
        key, body = self._new_resource(collection, scope, request.json())
        self._prepare(collection, body)
        self.resources[collection][key] = body
        operation = self._operation("insert", body["selfLink"], scope)
        self._in_steps(operation, [lambda: None])
        return operation

    def collection_patch(self, request: Request, params: dict[str, str]) -> Body:
        """The body merged into the resource (a list given replaces the old one), then checked
        as an insert would be; a stale fingerprint is refused."""
        collection = self._collection(params, writing=True)
        if not COLLECTIONS[collection].patchable:
            raise ApiError(404, "notFound", f"The fake does not model PATCH of {collection}")
        key = self._key(params, collection)
        current, patch = self._get(collection, key), request.json()
        if patch.get("name", current["name"]) != current["name"]:
            raise invalid_field("resource.name", patch["name"], "The name cannot change.")
        if patch.get("fingerprint", current.get("fingerprint")) != current.get("fingerprint"):
            raise ApiError(412, "conditionNotMet", "Supplied fingerprint does not match current "
                           "fingerprint.")  # fmt: skip
        changes = {name: value for name, value in patch.items() if name not in FIXED}
        body = merge_patch(copy.deepcopy(current), changes)
        self._check_fields(collection, body)
        self._prepare(collection, body)
        self.resources[collection][key] = body
        operation = self._operation("patch", body["selfLink"], self._scope(params))
        self._in_steps(operation, [lambda: None])
        return operation

    def collection_delete(self, request: Request, params: dict[str, str]) -> Body:
        """Deleted a step later, unless something uses it then (a network, a template...)."""
        collection = self._collection(params, writing=True)
        key = self._key(params, collection)
        body = self._get(collection, key)
        operation = self._operation("delete", body["selfLink"], self._scope(params))

        def remove() -> OperationError | None:
            if error := self._in_use(body):
                return error
            self.resources[collection].pop(key, None)
            self.group_instances.pop(key, None)  # an unmanaged group's members stay instances
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
        if machine_type not in MACHINE_TYPES or zone in NOT_OFFERED.get(machine_type, ()):
            why = f"Machine type with name '{machine_type}' does not exist in zone '{zone}'."
            raise invalid_field("resource.machineType", machine_type, why)
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
            for members in self.group_instances.values():  # it leaves its unmanaged groups
                if key in members:
                    members.remove(key)
            return
        instance = self.resources["instances"][key]
        instance["status"] = status
        if status == "RUNNING":
            instance["lastStartTimestamp"] = now()
            self._print_serial(key, BOOT_LINES.format(name=instance["name"]))
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

    def _print_serial(self, key: str, text: str) -> None:
        machine = self.machines[key]
        data = text.encode()
        machine.serial += data
        machine.serial_next += len(data)
        del machine.serial[: max(0, len(machine.serial) - self.config["serial_keep_bytes"])]

    def instance_serial_port(self, request: Request, params: dict[str, str]) -> Body:
        """The output from byte `start` on (port 1; ports 2-4 print nothing), from the oldest
        byte kept when `start` is older, its offset then the answer's `start`, as GCE does."""
        key = self._key(params, "instances")
        self._get("instances", key)
        if self.config["serial_denied"]:
            raise ApiError(403, "forbidden", "Required 'compute.instances.getSerialPortOutput' "
                           f"permission for '{self._relative(key)}'")  # fmt: skip
        port, start = request.query.get("port", "1"), request.query.get("start", "0")
        if port not in ("1", "2", "3", "4"):
            raise invalid_field("port", port, "Must be between 1 and 4.")
        if not start.lstrip("-").isdigit():
            raise invalid_field("start", start, "Must be an integer.")
        machine = self.machines[key]
        output = machine.serial if port == "1" else bytearray()
        end = machine.serial_next if port == "1" else 0
        oldest = end - len(output)
        begin = min(max(int(start), oldest), end)
        contents = bytes(output[begin - oldest :]).decode(errors="replace")
        return {"kind": "compute#serialPortOutput", "selfLink": self._link(key) + "/serialPort",
                "contents": contents, "start": str(begin), "next": str(end)}  # fmt: skip

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

    def _template_network(self, template_link: str) -> str | None:
        """The network of the template's first interface (through its subnetwork)."""
        template = self.resources["instanceTemplates"][self._key_of(template_link)]
        nics = template["properties"].get("networkInterfaces") or [{}]
        try:
            subnet = self._resolve("subnetwork", nics[0].get("subnetwork"), "subnetworks")
        except ApiError:
            return nics[0].get("network")
        return str(self.resources["subnetworks"][subnet]["network"])

    def group_insert(self, request: Request, params: dict[str, str]) -> Body:
        """The group and its own regional instance group (named like it, holding its instances),
        then its instances (the operation does not wait for them to run)."""
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
        ports = self._named_ports(group.get("namedPorts", []), "resource.namedPorts")
        own = {"name": group["name"], "namedPorts": ports, "fingerprint": fingerprint()}
        if network := self._template_network(group["instanceTemplate"]):
            own["network"] = network
        own_key, own = self._new_resource("instanceGroups", f"regions/{region}", own)
        group["distributionPolicy"] = {"zones": [{"zone": self._link(f"zones/{z}")} for z in zones]}
        group.update(targetSize=int(group.get("targetSize", 0)), fingerprint=fingerprint())
        group.update(namedPorts=copy.deepcopy(ports), instanceGroup=own["selfLink"])
        self.resources["instanceGroups"][own_key] = own
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
        """Delete the group's instances, then (a step after they are gone) the group itself and
        its own instance group."""
        key = self._key(params, "instanceGroupManagers")
        group = self._get("instanceGroupManagers", key)
        own_key = self._key_of(group["instanceGroup"])
        operation = self._operation("delete", group["selfLink"], self._scope(params))
        own = self.resources["instanceGroups"].get(own_key)
        # an autoscaler targets it, a backend service has its instance group
        if error := self._in_use(group) or (own and self._in_use(own)):
            self._in_steps(operation, [lambda: error])
            return operation
        self._group_shrink(key, len(self._members(key)) + len(self.group_failures[key]))

        def remove() -> None:
            self.resources["instanceGroupManagers"].pop(key, None)
            self.resources["instanceGroups"].pop(own_key, None)
            self.group_failures.pop(key, None)

        self._in_steps(operation, [lambda: None, remove])
        return operation

    # ---- load balancing -----------------------------------------------------------------------
    def _public_address(self) -> str:
        """A global external IPv4 address no address or forwarding rule has yet."""
        taken = {address["address"] for address in self.resources["addresses"].values()}
        taken |= {rule["IPAddress"] for rule in self.resources["forwardingRules"].values()}
        while True:
            address = f"34.120.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"
            if address not in taken:
                return address

    def _prepare_address(self, body: Body) -> None:
        body.setdefault("addressType", "EXTERNAL")
        body.setdefault("ipVersion", "IPV4")
        if body["addressType"] != "EXTERNAL" or body["ipVersion"] != "IPV4":
            raise invalid_field("resource.addressType", body["addressType"],
                                "The fake reserves external IPv4 addresses only.")  # fmt: skip
        body.update(address=self._public_address(), networkTier="PREMIUM", status="RESERVED")

    def _prepare_health_check(self, body: Body) -> None:
        if body["type"] != "HTTP":
            raise invalid_field("resource.type", body["type"], "The fake models HTTP checks only.")
        check = body.setdefault("httpHealthCheck", {})
        check.setdefault("port", 80)
        check.setdefault("requestPath", "/")
        check.setdefault("proxyHeader", "NONE")
        if isinstance(check["port"], bool) or check["port"] not in range(1, 65536):
            raise invalid_field("resource.httpHealthCheck.port", check["port"], "Must be 1-65535.")
        if not str(check["requestPath"]).startswith("/"):
            raise invalid_field("resource.httpHealthCheck.requestPath", check["requestPath"],
                                "Must start with '/'.")  # fmt: skip
        for name, default in [("checkIntervalSec", 5), ("timeoutSec", 5),
                              ("healthyThreshold", 2), ("unhealthyThreshold", 2)]:  # fmt: skip
            body.setdefault(name, default)
        if body["timeoutSec"] > body["checkIntervalSec"]:
            raise invalid_field("resource.timeoutSec", body["timeoutSec"],
                                "timeoutSec should be less than checkIntervalSec.")  # fmt: skip

    def _prepare_backend_service(self, body: Body) -> None:
        body.setdefault("protocol", "HTTP")
        body.setdefault("portName", "http")
        body.setdefault("loadBalancingScheme", "EXTERNAL")
        body.setdefault("timeoutSec", 30)
        if body["protocol"] not in ("HTTP", "HTTPS", "HTTP2"):
            raise invalid_field("resource.protocol", body["protocol"], "HTTP, HTTPS or HTTP2.")
        if body["loadBalancingScheme"] not in ("EXTERNAL", "EXTERNAL_MANAGED"):
            raise invalid_field("resource.loadBalancingScheme", body["loadBalancingScheme"],
                                "The fake models global external load balancers only.")  # fmt: skip
        backends, checks = body.setdefault("backends", []), body.setdefault("healthChecks", [])
        for index, backend in enumerate(backends):
            if not backend.get("group"):
                raise invalid(f"Required field 'resource.backends[{index}].group' not specified")
            backend.setdefault("balancingMode", "UTILIZATION")
            backend.setdefault("capacityScaler", 1)
        groups = [backend["group"] for backend in backends]
        if len(set(groups)) < len(groups):
            raise invalid_field("resource.backends", groups, "A group is a backend only once.")
        if backends and not checks:
            raise invalid_field("resource.healthChecks", "", "A backend service with instance "
                                "group backends needs a health check.")  # fmt: skip
        if len(checks) > 1:
            raise invalid_field("resource.healthChecks", checks, "At most one health check.")
        body["fingerprint"] = fingerprint()

    def _prepare_forwarding_rule(self, body: Body) -> None:
        """The IPAddress, a reserved address's URL or literal (none: an ephemeral one), becomes
        the literal; the port range is 80 or 8080, the scheme that of the backend service."""
        given = body.get("IPAddress")
        reserved = {address["address"] for address in self.resources["addresses"].values()}
        if not given:
            body["IPAddress"] = self._public_address()
        elif re.fullmatch(r"[\d.]+", str(given)):
            if given not in reserved:
                raise invalid_field("resource.IPAddress", given,
                                    "Not a reserved global address of the project.")  # fmt: skip
        else:
            key = self._resolve("resource.IPAddress", given, "addresses")
            body["IPAddress"] = self.resources["addresses"][key]["address"]
        if body.setdefault("IPProtocol", "TCP") != "TCP":
            raise invalid_field("resource.IPProtocol", body["IPProtocol"], "Must be TCP.")
        ports = re.fullmatch(r"(\d+)(?:-(\d+))?", str(body["portRange"]))
        if not ports or ports[1] != (ports[2] or ports[1]) or int(ports[1]) not in (80, 8080):
            raise invalid_field("resource.portRange", body["portRange"],
                                "A target HTTP proxy serves on port 80 or 8080.")  # fmt: skip
        body["portRange"] = f"{ports[1]}-{ports[1]}"
        scheme = body.setdefault("loadBalancingScheme", "EXTERNAL")
        proxy = self.resources["targetHttpProxies"][self._key_of(body["target"])]
        url_map = self.resources["urlMaps"][self._key_of(proxy["urlMap"])]
        service = self.resources[SERVICE][self._key_of(url_map["defaultService"])]
        if service["loadBalancingScheme"] != scheme:
            raise invalid_field("resource.loadBalancingScheme", scheme,
                                f"The backend service's is {service['loadBalancingScheme']}.")  # fmt: skip
        body.update(networkTier="PREMIUM", fingerprint=fingerprint())

    def _named_ports(self, ports: Any, where: str = "resource.namedPorts") -> list[Body]:
        if not isinstance(ports, list) or not all(isinstance(port, dict) for port in ports):
            raise invalid_field(where, ports, "A list of {name, port} is expected.")
        for index, port in enumerate(ports):
            self._check_name(port.get("name"), f"{where}[{index}].name")
            number = port.get("port")
            if isinstance(number, bool) or number not in range(1, 65536):
                raise invalid_field(f"{where}[{index}].port", number, "Must be 1-65535.")
        return [{"name": port["name"], "port": port["port"]} for port in ports]

    def _group_members(self, key: str) -> list[str]:
        """The instance keys of an instance group: a MIG's instances for its own group."""
        manager = key.replace("/instanceGroups/", "/instanceGroupManagers/")
        if manager in self.resources["instanceGroupManagers"]:
            return self._members(manager)
        return list(self.group_instances.get(key, []))

    def igroup_members(self, request: Request, params: dict[str, str]) -> Body:
        """addInstances / removeInstances of an unmanaged group: checked at once, done a step
        later. An added instance must be in the group's zone and network (the first sets it)."""
        key, action = self._key(params, "instanceGroups"), params["action"]
        group = self._get("instanceGroups", key)
        entries = request.json().get("instances") or []
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise invalid_field("instances", entries, "A list of {instance} is expected.")
        members, chosen = self.group_instances.setdefault(key, []), []
        network = group.get("network")
        for index, entry in enumerate(entries):
            where = f"instances[{index}].instance"
            instance_key = self._resolve(where, entry.get("instance"), "instances")
            if instance_key.split("/")[1] != params["zone"]:
                raise invalid_field(where, entry["instance"], f"Not in zone {params['zone']}.")
            relative = (self._relative(instance_key), self._relative(key))
            if action == "addInstances":
                if instance_key in members:
                    raise ApiError(400, "memberAlreadyExists",
                                   "The resource '{}' is already a member of '{}'".format(*relative))  # fmt: skip
                nic = self.resources["instances"][instance_key]["networkInterfaces"][0]
                if (network := network or nic["network"]) != nic["network"]:
                    raise invalid_field(where, entry["instance"], "Not in the group's network.")
            elif instance_key not in members:
                raise ApiError(400, "memberNotFound",
                               "The resource '{}' is not a member of '{}'".format(*relative))  # fmt: skip
            chosen.append(instance_key)
        if network:
            group["network"] = network

        def apply() -> None:
            current = self.group_instances.get(key)
            for instance_key in chosen if current is not None else []:
                if action == "removeInstances" and instance_key in current:
                    current.remove(instance_key)
                elif action == "addInstances" and instance_key not in current:
                    current.append(instance_key)

        operation = self._operation(action, group["selfLink"], self._scope(params))
        self._in_steps(operation, [apply])
        return operation

    def igroup_list_instances(self, request: Request, params: dict[str, str]) -> Body:
        key = self._key(params, "instanceGroups")
        group = self._get("instanceGroups", key)
        state = request.json().get("instanceState", "ALL")
        if state not in ("ALL", "RUNNING"):
            raise invalid_field("instanceState", state, "ALL or RUNNING.")
        items = []
        for member in self._group_members(key):
            instance = self.resources["instances"].get(member)
            if instance and state in ("ALL", instance["status"]):
                items.append({"instance": instance["selfLink"], "status": instance["status"]})
                if group["namedPorts"]:
                    items[-1]["namedPorts"] = copy.deepcopy(group["namedPorts"])
        kind = "regionInstanceGroups" if "region" in params else "instanceGroups"
        return {"kind": f"compute#{kind}ListInstances", "items": items}

    def igroup_named_ports(self, request: Request, params: dict[str, str]) -> Body:
        """setNamedPorts of a zonal group or a MIG's own (the MIG shows them too)."""
        key = self._key(params, "instanceGroups")
        group, body = self._get("instanceGroups", key), request.json()
        if body.get("fingerprint", group["fingerprint"]) != group["fingerprint"]:
            raise ApiError(412, "conditionNotMet", "Supplied fingerprint does not match current "
                           "fingerprint.")  # fmt: skip
        ports = self._named_ports(body.get("namedPorts", []), "namedPorts")
        group.update(namedPorts=ports, fingerprint=fingerprint())
        manager = key.replace("/instanceGroups/", "/instanceGroupManagers/")
        if manager in self.resources["instanceGroupManagers"]:
            self.resources["instanceGroupManagers"][manager]["namedPorts"] = copy.deepcopy(ports)
        operation = self._operation("setNamedPorts", group["selfLink"], self._scope(params))
        self._in_steps(operation, [lambda: None])
        return operation

    def backend_health(self, request: Request, params: dict[str, str]) -> Body:
        """Each instance of the group, HEALTHY when it runs, its bootstrap reported ready (the
        simulated NGINX answers) and the health check asks the port it serves on."""
        service = self._get(SERVICE, self._key(params, SERVICE))
        given = request.json().get("group")
        group_key = self._resolve("resourceGroupReference.group", given, "instanceGroups")
        if self._link(group_key) not in [backend["group"] for backend in service["backends"]]:
            raise invalid_field("resourceGroupReference.group", given,
                                f"Not a backend of {self._relative(service)}.")  # fmt: skip
        checks = [self.resources["healthChecks"][self._key_of(link)]
                  for link in service["healthChecks"]]  # fmt: skip
        checked = checks[0]["httpHealthCheck"]["port"] if checks else None
        named = {port["name"]: port["port"]
                 for port in self.resources["instanceGroups"][group_key]["namedPorts"]}  # fmt: skip
        statuses = []
        for key in self._group_members(group_key):
            instance, machine = self.resources["instances"][key], self.machines[key]
            ready = machine.guest.get(BOOTSTRAP_ATTRIBUTE) == "ready"
            healthy = instance["status"] == "RUNNING" and ready
            healthy = healthy and checked == self.config["serving_port"]
            statuses.append(
                {"instance": instance["selfLink"],
                 "ipAddress": instance["networkInterfaces"][0]["networkIP"],
                 "port": named.get(service["portName"], checked),
                 "healthState": "HEALTHY" if healthy else "UNHEALTHY"}
            )  # fmt: skip
        answer: Body = {"kind": "compute#backendServiceGroupHealth"}
        if statuses:
            answer["healthStatus"] = statuses
        return answer

    # ---- Cloud DNS ----------------------------------------------------------------------------
    def _dns_zone(self, params: dict[str, str]) -> ManagedZone:
        """A zone by its name or id."""
        wanted = params["managed_zone"]
        for zone in self.dns.values():
            if wanted in (zone.body["name"], zone.body["id"]):
                return zone
        raise ApiError(404, "notFound",
                       f"The 'parameters.managedZone' resource named '{wanted}' does not exist.")  # fmt: skip

    @staticmethod
    def _rrset(name: str, kind: str, ttl: int, rrdatas: list[str]) -> Body:
        return {"kind": "dns#resourceRecordSet", "name": name, "type": kind, "ttl": ttl,
                "rrdatas": rrdatas}  # fmt: skip

    def dns_zone_list(self, request: Request, params: dict[str, str]) -> Body:
        """All zones, or (?dnsName=) those of exactly that name, its final dot included."""
        wanted = request.query.get("dnsName")
        zones = [copy.deepcopy(zone.body) for zone in self.dns.values()
                 if wanted is None or zone.body["dnsName"] == wanted]  # fmt: skip
        return {"kind": "dns#managedZonesListResponse", "managedZones": zones}

    def dns_zone_create(self, request: Request, params: dict[str, str]) -> Body:
        """A public zone, with its SOA and NS record sets on one of five name server shards."""
        body = request.json()
        name, dns_name = body.get("name"), body.get("dnsName")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise invalid(f"Invalid value for 'entity.managedZone.name': '{name or ''}'")
        if not isinstance(dns_name, str) or not DNS_NAME.fullmatch(dns_name):
            raise invalid(f"Invalid value for 'entity.managedZone.dnsName': '{dns_name or ''}'")
        if not body.get("description"):
            raise ApiError(400, "required", "Required value for 'entity.managedZone.description'")
        if body.get("visibility", "public") != "public":
            raise invalid(f"Invalid value for 'entity.managedZone.visibility': "
                          f"'{body['visibility']}' (the fake models public zones only)")  # fmt: skip
        if name in self.dns:
            raise ApiError(409, "alreadyExists",
                           f"The resource 'entity.managedZone' named '{name}' already exists")  # fmt: skip
        shard = secrets.choice("abcde")
        servers = [f"ns-cloud-{shard}{index}.googledomains.com." for index in range(1, 5)]
        zone = {"kind": "dns#managedZone", "name": name, "dnsName": dns_name,
                "description": body["description"], "id": new_id(), "nameServers": servers,
                "creationTime": now(), "visibility": "public", "labels": body.get("labels", {}),
                "cloudLoggingConfig": {"kind": "dns#managedZoneCloudLoggingConfig"}}  # fmt: skip
        soa = f"{servers[0]} cloud-dns-hostmaster.google.com. 1 {SOA_TIMES}"
        rrsets = [self._rrset(dns_name, "SOA", 21600, [soa]),
                  self._rrset(dns_name, "NS", 21600, servers)]  # fmt: skip
        self.dns[name] = ManagedZone(zone, rrsets)
        return copy.deepcopy(zone)

    def dns_zone_get(self, request: Request, params: dict[str, str]) -> Body:
        return copy.deepcopy(self._dns_zone(params).body)

    def dns_zone_delete(self, request: Request, params: dict[str, str]) -> None:
        """204, unless the zone holds record sets besides its own SOA and NS."""
        zone = self._dns_zone(params)
        apex = {(zone.body["dnsName"], "SOA"), (zone.body["dnsName"], "NS")}
        if any((rrset["name"], rrset["type"]) not in apex for rrset in zone.rrsets):
            raise ApiError(400, "containerNotEmpty", f"The resource named '{zone.body['name']}' "
                           "cannot be deleted because it is not empty")  # fmt: skip
        del self.dns[zone.body["name"]]

    def dns_rrsets(self, request: Request, params: dict[str, str]) -> Body:
        zone = self._dns_zone(params)
        name, kind = request.query.get("name"), request.query.get("type")
        if kind and not name:
            raise invalid("Invalid value for 'parameters.type': it needs 'parameters.name' too")
        rrsets = [rrset for rrset in zone.rrsets
                  if name in (None, rrset["name"]) and kind in (None, rrset["type"])]  # fmt: skip
        return {"kind": "dns#resourceRecordSetsListResponse", "rrsets": copy.deepcopy(rrsets)}

    def _change_rrset(self, zone: ManagedZone, rrset: Any, where: str) -> Body:
        """A record set of a change, checked: a name in the zone, a type, a TTL, its data."""
        if not isinstance(rrset, dict):
            raise invalid(f"Invalid value for '{where}': '{rrset}'")
        name, kind, ttl, rrdatas = (rrset.get(part) for part in ("name", "type", "ttl", "rrdatas"))
        apex = zone.body["dnsName"]
        inside = isinstance(name, str) and (name == apex or name.endswith("." + apex))
        if not inside or not DNS_NAME.fullmatch(name):
            raise invalid(f"Invalid value for '{where}.name': '{name or ''}'")
        if kind not in RECORD_TYPES:
            raise invalid(f"Invalid value for '{where}.type': '{kind or ''}'")
        if isinstance(ttl, str) and ttl.isdigit():
            ttl = int(ttl)
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
            raise invalid(f"Invalid value for '{where}.ttl': '{ttl or ''}'")
        if not isinstance(rrdatas, list) or not rrdatas or (kind == "CNAME" and len(rrdatas) > 1):
            raise invalid(f"Invalid value for '{where}.rrdatas': '{rrdatas or ''}'")
        for index, data in enumerate(rrdatas):
            try:
                if kind == "A":
                    ipaddress.IPv4Address(data)
                elif kind == "AAAA":
                    ipaddress.IPv6Address(data)
            except ValueError:
                raise invalid(f"Invalid value for '{where}.rrdata[{index}]': '{data}'") from None
        return self._rrset(name, kind, ttl, [str(data) for data in rrdatas])

    def dns_change(self, request: Request, params: dict[str, str]) -> Body:
        """Deletions (each matching a record set exactly), then additions (of a name and type
        not there), all or nothing; done at once."""
        zone, body = self._dns_zone(params), request.json()
        additions = [self._change_rrset(zone, rrset, f"entity.change.additions[{index}]")
                     for index, rrset in enumerate(body.get("additions") or [])]  # fmt: skip
        deletions = [self._change_rrset(zone, rrset, f"entity.change.deletions[{index}]")
                     for index, rrset in enumerate(body.get("deletions") or [])]  # fmt: skip
        if not additions and not deletions:
            raise ApiError(400, "required", "Required value for 'entity.change'")
        rrsets = list(zone.rrsets)
        for index, deletion in enumerate(deletions):
            if deletion not in rrsets:
                raise ApiError(412, "conditionNotMet",
                               f"Precondition not met for 'entity.change.deletions[{index}]'")  # fmt: skip
            rrsets.remove(deletion)
        for index, addition in enumerate(additions):
            if any((rrset["name"], rrset["type"]) == (addition["name"], addition["type"])
                   for rrset in rrsets):  # fmt: skip
                raise ApiError(409, "alreadyExists",
                               f"The resource 'entity.change.additions[{index}]' named "
                               f"'{addition['name']} ({addition['type']})' already exists")  # fmt: skip
            rrsets.append(addition)
        apex = zone.body["dnsName"]
        kept = {(rrset["name"], rrset["type"]) for rrset in rrsets}
        if not {(apex, "SOA"), (apex, "NS")} <= kept:
            raise invalid(f"Invalid value for 'entity.change': the zone keeps its SOA and NS "
                          f"record sets at '{apex}'")  # fmt: skip
        for name in {name for name, kind in kept if kind == "CNAME"}:
            if sum(other == name for other, _ in kept) > 1:
                raise ApiError(400, "cnameResourceRecordSetConflict",
                               f"The resource named '{name}' has a CNAME and another record set")  # fmt: skip
        zone.rrsets, zone.changes = rrsets, zone.changes + 1
        return {"kind": "dns#change", "id": str(zone.changes), "startTime": now(),
                "status": "done", "additions": additions, "deletions": deletions}  # fmt: skip

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
