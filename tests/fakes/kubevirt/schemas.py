"""Validation of the objects the fake is sent, against KubeVirt's and CDI's OpenAPI documents
(vendored in `openapi/`) as the API server validates against a CRD's structural schema: a value
of the wrong type or a missing required field is a 422 `Invalid`; a field the schema does not
declare is pruned, or refused (400) when the request asks for strict field validation."""

import copy
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator

OPENAPI = Path(__file__).parent / "openapi"

# The core and Multus kinds the console sends, as far as the fake reads them (the API server
# knows them natively; Multus's CRD declares only spec.config).
_META = {"$ref": "#/definitions/k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
_TYPE_META = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}}
_QUANTITY = {"type": "string", "format": "int-or-string"}
_OWN_KINDS: dict[str, dict[str, Any]] = {
    "Namespace": {"type": "object", "properties": {**_TYPE_META, "metadata": _META}},
    "Secret": {
        "type": "object",
        "properties": {
            **_TYPE_META,
            "metadata": _META,
            "type": {"type": "string"},
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
            "stringData": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "PersistentVolumeClaim": {  # the console grows a disk's claim (spec.resources.requests)
        "type": "object",
        "properties": {
            **_TYPE_META,
            "metadata": _META,
            "spec": {
                "type": "object",
                "properties": {
                    "accessModes": {"type": "array", "items": {"type": "string"}},
                    "volumeMode": {"type": "string"},
                    "storageClassName": {"type": "string"},
                    "volumeName": {"type": "string"},
                    "resources": {
                        "type": "object",
                        "properties": {
                            "requests": {"type": "object", "additionalProperties": _QUANTITY},
                            "limits": {"type": "object", "additionalProperties": _QUANTITY},
                        },
                    },
                },
            },
            "status": {"type": "object"},
        },
    },
    "RoleBinding": {
        "type": "object",
        "required": ["roleRef"],
        "properties": {
            **_TYPE_META,
            "metadata": _META,
            "roleRef": {
                "type": "object",
                "required": ["apiGroup", "kind", "name"],
                "properties": {key: {"type": "string"} for key in ("apiGroup", "kind", "name")},
            },
            "subjects": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["kind", "name"],
                    "properties": {
                        key: {"type": "string"} for key in ("apiGroup", "kind", "name", "namespace")
                    },
                },
            },
        },
    },
    "NetworkAttachmentDefinition": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            **_TYPE_META,
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["config"],
                "properties": {"config": {"type": "string"}},
            },
        },
    },
}
# kind → its definition in the KubeVirt or CDI document
_DEFINITIONS = {
    "VirtualMachine": ("kubevirt", "v1.VirtualMachine"),
    "VirtualMachineInstance": ("kubevirt", "v1.VirtualMachineInstance"),
    "VirtualMachineInstanceMigration": ("kubevirt", "v1.VirtualMachineInstanceMigration"),
    "VirtualMachineSnapshot": ("kubevirt", "v1beta1.VirtualMachineSnapshot"),
    "VirtualMachineRestore": ("kubevirt", "v1beta1.VirtualMachineRestore"),
    "VirtualMachineSnapshotContent": ("kubevirt", "v1beta1.VirtualMachineSnapshotContent"),
    "AddVolumeOptions": ("kubevirt", "v1.AddVolumeOptions"),
    "RemoveVolumeOptions": ("kubevirt", "v1.RemoveVolumeOptions"),
    "StartOptions": ("kubevirt", "v1.StartOptions"),
    "StopOptions": ("kubevirt", "v1.StopOptions"),
    "RestartOptions": ("kubevirt", "v1.RestartOptions"),
    "DataVolume": ("cdi", "v1beta1.DataVolume"),
}


@dataclass
class Verdict:
    """What validation found: `causes` (field, message) make a 422; `unknown` are the paths
    of fields the schema does not declare."""

    causes: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _strict(schema: Any) -> Any:
    """A copy in which every object with declared properties admits no others, so unknown
    fields surface as errors the validator can name; int-or-string takes both."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if schema.get("format") == "int-or-string":
            schema["type"] = ["string", "integer"]
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def _definitions() -> dict[str, dict[str, Any]]:
    documents = {
        name: json.loads((OPENAPI / f"{name}-swagger.json").read_text())["definitions"]
        for name in ("kubevirt", "cdi")
    }
    return {name: _strict(definitions) for name, definitions in documents.items()}


@cache
def validator(kind: str) -> Draft4Validator | None:
    """The kind's validator, or None for a kind the fake takes as it comes."""
    if kind in _OWN_KINDS:
        definitions = _definitions()["kubevirt"]
        return Draft4Validator({**_strict(_OWN_KINDS[kind]), "definitions": definitions})
    if kind not in _DEFINITIONS:
        return None
    document, name = _DEFINITIONS[kind]
    definitions = _definitions()[document]
    return Draft4Validator({"$ref": f"#/definitions/{name}", "definitions": definitions})


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def validate(kind: str, body: dict[str, Any]) -> Verdict:
    """Every problem of `body` as a `kind`, the API server's way: each cause at its field."""
    verdict = Verdict()
    check = validator(kind)
    if check is None:
        return verdict
    for error in check.iter_errors(body):
        where = _path(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = error.schema.get("properties", {})
            for name in sorted(set(error.instance) - set(declared)):
                verdict.unknown.append(f"{where}.{name}".lstrip("."))
        elif error.validator == "required":
            missing = str(error.message).split("'")[1]
            verdict.causes.append((f"{where}.{missing}".lstrip("."), "Required value"))
        elif error.validator == "type":
            verdict.causes.append((where, f"Invalid value: {error.message}"))
        else:
            verdict.causes.append((where, f"Invalid value: {error.message}"))
    return verdict


def pruned(body: dict[str, Any], unknown: list[str]) -> dict[str, Any]:
    """`body` without the unknown fields, as the API server prunes a CRD's object."""
    body = copy.deepcopy(body)
    for path in unknown:
        node: Any = body
        *parents, last = _split(path)
        for part in parents:
            node = node[part]
        node.pop(last, None)
    return body


def _split(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for piece in path.split("."):
        name, *indexes = piece.split("[")
        if name:
            parts.append(name)
        parts.extend(int(index.rstrip("]")) for index in indexes)
    return parts
