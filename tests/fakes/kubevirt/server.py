"""The fake's HTTP side: the Kubernetes API's paths, verbs, Status errors, bearer tokens with
RBAC rules, and watches (chunked JSON lines, bookmarks, 410 Gone on an old version), so the
real `kubernetes` client drives it as it would a cluster's API server."""

import copy
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request
from websockets.server import ServerProtocol
from websockets.sync.connection import Connection as WebsocketConnection

from tests.fakes.kubevirt import schemas, webhooks
from tests.fakes.kubevirt.store import BY_KIND, BY_PATH, ApiError, Body, Event, Resource, Store

SUBRESOURCES_GROUP = "subresources.kubevirt.io"
# (plural, subresource) → handler(namespace, name, body) answering a PUT to a KubeVirt action
Action = Callable[[str, str, Body], Body | None]
# (plural, subresource) → opener(namespace, name): the unix socket a console websocket bridges to
Stream = Callable[[str, str], Path]
Admission = Callable[[str, Body], None]  # a validating webhook: raises ApiError to refuse
Deletion = Callable[[str, str], Body]  # deletes (namespace, name) as its controller does
CONSOLE_SUBPROTOCOL = "plain.kubevirt.io"
# the body of a KubeVirt action, by its subresource (softreboot and the consoles take none)
ACTION_OPTIONS = {
    "start": "StartOptions", "stop": "StopOptions", "restart": "RestartOptions",
    "addvolume": "AddVolumeOptions", "removevolume": "RemoveVolumeOptions",
}  # fmt: skip


@dataclass
class Sent:
    """An object a client sent, as its kind, with what validating it found; `agent` is the
    client's User-Agent (the console's is zopday-console)."""

    agent: str
    kind: str
    body: Body
    verdict: schemas.Verdict


@dataclass
class Subject:
    """Whom a bearer token authenticates: its RBAC rules as (verbs, API group, resources), all
    of them when None; a token past `expires` is refused as the API server refuses it (401)."""

    user: str
    rules: list[tuple[set[str], str, set[str]]] | None = None
    expires: float | None = None

    def allows(self, verb: str, group: str, resource: str) -> bool:
        if self.rules is None:
            return True
        return any(
            (verb in verbs or "*" in verbs)
            and rule_group in (group, "*")
            and (resource in resources or "*" in resources)
            for verbs, rule_group, resources in self.rules
        )


def _subject_user(subject: Body) -> str:
    """The user name a RoleBinding's subject authenticates as."""
    if subject.get("kind") == "ServiceAccount":
        return f"system:serviceaccount:{subject.get('namespace', '')}:{subject['name']}"
    return str(subject.get("name", ""))


@dataclass
class Route:
    resource: Resource
    namespace: str | None  # None: every namespace (or a cluster-scoped kind)
    name: str = ""
    subresource: str = ""
    action_group: str = ""  # the subresources.kubevirt.io group of a KubeVirt action


def selector_matches(query: dict[str, str]) -> Callable[[Body], bool]:
    """labelSelector's equality terms (a=b, a!=b, a) and fieldSelector's metadata.name."""
    terms = [term for term in query.get("labelSelector", "").split(",") if term]
    fields = dict(
        term.split("=", 1) for term in query.get("fieldSelector", "").split(",") if "=" in term
    )

    def matches(body: Body) -> bool:
        labels = body.get("metadata", {}).get("labels", {}) or {}
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key) == value:
                    return False
            elif "=" in term:
                key, value = term.split("=", 1)
                if labels.get(key.rstrip("=")) != value:
                    return False
            elif term not in labels:
                return False
        name = fields.get("metadata.name")
        return name is None or body["metadata"].get("name") == name

    return matches


def _pump_out(guest: socket.socket, websocket: WebsocketConnection) -> None:
    """The guest's console output to the websocket, until either end closes."""
    try:
        while data := guest.recv(65536):
            websocket.send(data)
    except (OSError, ConnectionClosed):
        pass
    finally:
        websocket.close()


def node(name: str, zone: str, cpu: str = "4", memory: str = "8Gi") -> Body:
    """A schedulable node in `zone`, with what it can give its pods."""
    resources = {"cpu": cpu, "memory": memory, "devices.kubevirt.io/kvm": "1k"}
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone,
                       "kubevirt.io/schedulable": "true"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApiServer:
    """The API server: `store` holds the objects, `actions` KubeVirt's subresource verbs (the
    controller registers them), `tokens` who may call."""

    def __init__(
        self,
        *,
        bookmark_seconds: float = 1.0,
        zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-a"),  # a migration target in zone-a
    ) -> None:
        self.store = Store()
        for index, zone in enumerate(zones):
            self.store.create(BY_PATH[("", "v1", "nodes")], "", node(f"node-{index + 1}", zone))
        self.actions: dict[tuple[str, str], Action] = {}
        self.streams: dict[tuple[str, str], Stream] = {}
        self.admissions: dict[str, Admission] = {}  # kind → KubeVirt's webhook for creates
        self.validations: dict[str, Admission] = {  # kind → its webhook for creates and updates
            "VirtualMachine": webhooks.admit_vm
        }
        self.deletions: dict[str, Deletion] = {}  # kind → what a DELETE sets going (a VMI's pod)
        self.tokens: dict[str, Subject] = {}
        # ClusterRoles a RoleBinding may name: their rules hold in the binding's namespace
        self.cluster_roles: dict[str, list[tuple[set[str], str, set[str]]]] = {}
        self.requests: Counter[str] = Counter()  # "GET virtualmachines", "WATCH ...", ...
        self.sent: list[Sent] = []  # every object and action body, as validated
        self.bookmark_seconds = bookmark_seconds
        self.closing = threading.Event()
        server = self

        class Handler(_Handler):
            api = server

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def add_token(self, token: str, subject: Subject) -> None:
        self.tokens[token] = subject

    def stop(self) -> None:
        self.closing.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self.http.shutdown()
        self.http.server_close()

    # ---- one request -------------------------------------------------------------------------
    def route(self, path: str) -> Route:
        parts = [part for part in path.split("/") if part]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        action_group = ""
        if group == SUBRESOURCES_GROUP:
            action_group, group = group, "kubevirt.io"
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = BY_PATH.get((group, version, rest[0] if rest else ""))
        if resource is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if resource.namespaced is False:
            namespace = ""
        return Route(
            resource,
            namespace,
            rest[1] if len(rest) > 1 else "",
            "/".join(rest[2:]),
            action_group,
        )

    def authorize(self, header: str, verb: str, route: Route) -> None:
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        subject = self.tokens.get(token)
        if subject is None or (subject.expires is not None and time.time() > subject.expires):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        resource = route.resource.plural + (f"/{route.subresource}" if route.subresource else "")
        group = route.action_group or route.resource.group
        if not subject.allows(verb, group, resource) and not self.bound_allows(
            subject, verb, group, resource, route.namespace
        ):
            where = f' in the namespace "{route.namespace}"' if route.namespace else ""
            named = (
                f'{route.resource.plural}.{group} "{route.name}"'
                if route.name
                else (f"{route.resource.plural}.{group}")
            )
            raise ApiError(
                403,
                "Forbidden",
                f'{named} is forbidden: User "{subject.user}" cannot {verb} resource '
                f'"{resource}" in API group "{group}"{where}',
                {"name": route.name, "group": group, "kind": route.resource.plural},
            )

    def bound_allows(
        self, subject: Subject, verb: str, group: str, resource: str, namespace: str | None
    ) -> bool:
        """Whether a RoleBinding of the namespace gives the subject a ClusterRole allowing it."""
        if not namespace:
            return False
        bindings, _ = self.store.list(BY_KIND["RoleBinding"], namespace, lambda _: True)
        for binding in bindings:
            bound = {_subject_user(named) for named in binding.get("subjects", [])}
            rules = self.cluster_roles.get(binding["roleRef"]["name"])
            if (
                subject.user in bound
                and rules
                and Subject(subject.user, rules).allows(verb, group, resource)
            ):
                return True
        return False

    def admit(self, kind: str, namespace: str, body: Body, *, created: bool = False) -> None:
        """KubeVirt's validating webhooks for the kind: raise ApiError to refuse the write."""
        if created and (admit := self.admissions.get(kind)):
            admit(namespace, body)
        if validate := self.validations.get(kind):
            validate(namespace, body)

    def checked(
        self, resource: Resource, body: Body, query: dict[str, str], agent: str = ""
    ) -> tuple[Body, str]:
        """The body as stored (unknown fields pruned) and a warning; a 422 or 400 if invalid."""
        if body.get("kind") not in (None, resource.kind):
            raise ApiError(400, "BadRequest", f"the kind {body.get('kind')} is not {resource.kind}")
        verdict = schemas.validate(resource.kind, body)
        self.sent.append(Sent(agent, resource.kind, copy.deepcopy(body), verdict))
        name = body.get("metadata", {}).get("name", "")
        if verdict.causes:
            causes = [
                {"reason": "FieldValueInvalid", "message": message, "field": where}
                for where, message in verdict.causes
            ]
            listed = ", ".join(f"{cause['field']}: {cause['message']}" for cause in causes)
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind}.{resource.group} "{name}" is invalid: {listed}',
                {"name": name, "group": resource.group, "kind": resource.kind, "causes": causes},
            )
        if not verdict.unknown:
            return body, ""
        unknown = ", ".join(f'unknown field "{path}"' for path in verdict.unknown)
        if query.get("fieldValidation") == "Strict":
            raise ApiError(400, "BadRequest", f"strict decoding error: {unknown}")
        return schemas.pruned(body, verdict.unknown), unknown

    def namespace_exists(self, route: Route) -> None:
        if route.resource.namespaced and route.namespace:
            namespaces = BY_PATH[("", "v1", "namespaces")]
            if self.store.find(namespaces, "", route.namespace) is None:
                raise ApiError(
                    404, "NotFound", f'namespaces "{route.namespace}" not found',
                    {"name": route.namespace, "kind": "namespaces"},
                )  # fmt: skip

    def patched(self, current: Body, content_type: str, patch: Any, resource: Resource) -> Body:
        if content_type.startswith("application/json-patch+json"):
            try:
                return jsonpatch.apply_patch(current, patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                raise ApiError(422, "Invalid", f"the JSON patch failed: {error}") from None
        if content_type.startswith("application/strategic-merge-patch+json") and resource.group:
            raise ApiError(
                415, "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )  # fmt: skip
        return merge_patch(current, patch)

    def events_for(self, route: Route, query: dict[str, str], since: int) -> list[Event]:
        matches = selector_matches(query)
        return [
            event
            for event in self.store.events_since(since)
            if event.resource == route.resource
            and route.namespace in (None, event.object["metadata"].get("namespace", ""))
            and matches(event.object)
        ]


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each answer waits out the client's delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.handle_call("GET")

    def do_POST(self) -> None:
        self.handle_call("POST")

    def do_PUT(self) -> None:
        self.handle_call("PUT")

    def do_PATCH(self) -> None:
        self.handle_call("PATCH")

    def do_DELETE(self) -> None:
        self.handle_call("DELETE")

    def handle_call(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if url.path == "/version":
                self.answer(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-zopday"})
                return
            route = self.api.route(url.path)
            watching = method == "GET" and query.get("watch") in ("true", "1")
            verb = self.verb(method, route, watching)
            self.api.requests[f"{verb} {route.resource.plural}"] += 1
            self.api.authorize(self.headers.get("Authorization", ""), verb, route)
            body = json.loads(raw) if raw else {}
            if method == "GET" and self.headers.get("Upgrade", "").lower() == "websocket":
                self.stream(route)
            elif watching:
                self.watch(route, query)
            else:
                self.dispatch(method, route, query, body)
        except ApiError as error:
            self.answer(error.code, error.status())
        except (ValueError, KeyError, TypeError) as error:
            failed = ApiError(400, "BadRequest", f"the request could not be read: {error}")
            self.answer(400, failed.status())

    @property
    def agent(self) -> str:
        return self.headers.get("User-Agent", "")

    @staticmethod
    def verb(method: str, route: Route, watching: bool) -> str:
        if watching:
            return "watch"
        if method == "GET":
            return "get" if route.name else "list"
        return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]

    def dispatch(self, method: str, route: Route, query: dict[str, str], body: Body) -> None:
        store, resource = self.api.store, route.resource
        namespace = route.namespace or ""
        if route.action_group:
            self.act(method, route, body)
        elif method == "GET" and route.name:
            self.answer(200, store.get(resource, namespace, route.name))
        elif method == "GET":
            items, version = store.list(resource, route.namespace, selector_matches(query))
            self.answer(200, {
                "kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": str(version)}, "items": items,
            })  # fmt: skip
        elif method == "POST" and not route.name:
            self.api.namespace_exists(route)
            stored, warning = self.api.checked(resource, body, query, self.agent)
            self.api.admit(resource.kind, namespace, stored, created=True)
            self.answer(201, store.create(resource, namespace, stored), warning)
        elif method == "PUT" and route.name and route.subresource in ("", "status"):
            if body.get("metadata", {}).get("name") != route.name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            stored, warning = self.api.checked(resource, body, query, self.agent)
            if route.subresource != "status":
                self.api.admit(resource.kind, namespace, stored)
            answer = store.replace(
                resource, namespace, stored, status=route.subresource == "status"
            )
            self.answer(200, answer, warning)
        elif method == "PATCH" and route.name and route.subresource in ("", "status"):
            current = store.get(resource, namespace, route.name)
            content_type = self.headers.get("Content-Type", "")
            changed = self.api.patched(current, content_type, body, resource)
            changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored, warning = self.api.checked(resource, changed, query, self.agent)
            if route.subresource != "status":
                self.api.admit(resource.kind, namespace, stored)
            answer = store.replace(
                resource, namespace, stored, status=route.subresource == "status"
            )
            self.answer(200, answer, warning)
        elif method == "DELETE" and route.name and not route.subresource:
            if delete := self.api.deletions.get(resource.kind):
                self.answer(200, delete(namespace, route.name))
            else:
                self.answer(200, store.delete(resource, namespace, route.name))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    def act(self, method: str, route: Route, body: Body) -> None:
        """A KubeVirt subresource (start, stop, console...), answered by its registered action."""
        handler = self.api.actions.get((route.resource.plural, route.subresource))
        if handler is None or not route.name:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if kind := ACTION_OPTIONS.get(route.subresource):
            verdict = schemas.validate(kind, body)
            self.api.sent.append(Sent(self.agent, kind, copy.deepcopy(body), verdict))
            if verdict.causes:
                listed = ", ".join(f"{where}: {message}" for where, message in verdict.causes)
                raise ApiError(422, "Invalid", f"the {kind} are invalid: {listed}")
        answer = handler(route.namespace or "", route.name, body)
        if answer is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.answer(200, answer)

    def stream(self, route: Route) -> None:
        """A console subresource as virt-api serves it: a websocket (plain.kubevirt.io) whose
        binary frames carry the guest's console bytes both ways."""
        opener = self.api.streams.get((route.resource.plural, route.subresource))
        if opener is None or not route.name or not route.action_group:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        path = opener(route.namespace or "", route.name)
        protocol = ServerProtocol(
            select_subprotocol=lambda _, offered: (
                CONSOLE_SUBPROTOCOL if CONSOLE_SUBPROTOCOL in offered else None
            )
        )
        # the request is read already: given again, so the protocol's parser moves past it
        head = "".join(f"{key}: {value}\r\n" for key, value in self.headers.items())
        protocol.receive_data(f"{self.requestline}\r\n{head}\r\n".encode("latin-1"))
        [request] = protocol.events_received()
        assert isinstance(request, Request)
        response = protocol.accept(request)
        protocol.send_response(response)
        self.connection.sendall(b"".join(protocol.data_to_send()))
        self.close_connection = True
        if response.status_code != 101:
            return
        guest = socket.socket(socket.AF_UNIX)
        try:
            guest.connect(str(path))
        except OSError:
            guest.close()
            protocol.send_close(1011, "the guest's console is gone")
            self.connection.sendall(b"".join(protocol.data_to_send()))
            return
        websocket = WebsocketConnection(self.connection, protocol)
        threading.Thread(target=_pump_out, args=(guest, websocket), daemon=True).start()
        try:
            for message in websocket:
                guest.sendall(message if isinstance(message, bytes) else message.encode())
        except (OSError, ConnectionClosed):
            pass
        finally:
            guest.close()
            websocket.close()

    def watch(self, route: Route, query: dict[str, str]) -> None:
        """Events after `resourceVersion` (all objects as ADDED first when it is absent or 0),
        as JSON lines; a BOOKMARK every `bookmark_seconds` when asked; an ERROR 410 once the
        version is too old; the end after `timeoutSeconds`."""
        store = self.api.store
        given = query.get("resourceVersion", "")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        if given in ("", "0"):
            items, since = store.list(route.resource, route.namespace, selector_matches(query))
            first = [{"type": "ADDED", "object": item} for item in items]
        else:
            since, first = int(given), []
            store.events_since(since)  # too old: a 410 Status before the stream starts
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in first:
                self.chunk(event)
            next_bookmark = time.monotonic() + self.api.bookmark_seconds
            while not self.api.closing.is_set() and time.monotonic() < deadline:
                try:
                    events, version = self.next_events(route, query, since, deadline, next_bookmark)
                except ApiError as error:  # the version got too old while it waited
                    self.chunk({"type": "ERROR", "object": error.status()})
                    break
                for event in events:
                    self.chunk({"type": event.type, "object": event.object})
                    since = event.version
                if bookmarks and time.monotonic() >= next_bookmark:
                    since = max(since, version)
                    self.chunk({"type": "BOOKMARK", "object": {
                        "kind": route.resource.kind, "apiVersion": route.resource.api_version,
                        "metadata": {"resourceVersion": str(since)},
                    }})  # fmt: skip
                    next_bookmark = time.monotonic() + self.api.bookmark_seconds
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def next_events(
        self, route: Route, query: dict[str, str], since: int, deadline: float, bookmark: float
    ) -> tuple[list[Event], int]:
        """The events after `since`, waiting for some until the deadline or the next bookmark;
        and the store's version then. ApiError 410 once `since` is no longer kept."""
        store = self.api.store
        with store.changed:
            events = self.api.events_for(route, query, since)
            if not events:
                store.changed.wait(max(0.0, min(deadline, bookmark) - time.monotonic()))
                events = self.api.events_for(route, query, since)
            return events, store.version

    def chunk(self, event: Body) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def answer(self, code: int, body: Body, warning: str = "") -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if warning:
            self.send_header("Warning", f'299 - "{warning}"')
        self.end_headers()
        self.wfile.write(data)
