"""The OpenAPI document also says what every operation shares and ninja cannot declare: the
ETag of an object, If-Match (412) on writes to it, If-None-Match (304) on reading it."""

from typing import Any

from ninja import NinjaAPI
from ninja.openapi.schema import OpenAPISchema

from instances.api.conditions import NOT_OBJECTS

ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
NOT_OBJECT_REFS = {f"#/components/schemas/{schema.__name__}" for schema in NOT_OBJECTS}
ETAG = {
    "description": "A strong ETag of this object as GET answers it now; it changes with anything "
    "the object shows (its state, a guest report, what the caller may do).",
    "schema": {"type": "string"},
}
IF_MATCH = {
    "in": "header",
    "name": "If-Match",
    "required": False,
    "schema": {"type": "string"},
    "description": "The ETag from your last read of the object (or `*`): if it changed since, "
    "the request is refused with 412 and changes nothing. On a POST, the object is the one "
    "the path is under (`/disks/5/resize`: disk 5).",
}
IF_NONE_MATCH = {
    "in": "header",
    "name": "If-None-Match",
    "required": False,
    "schema": {"type": "string"},
    "description": "An ETag you hold: 304 with no body while the object still has it.",
}
PRECONDITION_FAILED = {
    "description": "If-Match does not hold: the object changed since it was read. The answer "
    "carries its current ETag.",
    "content": ERROR_BODY,
}


class DocumentedAPI(NinjaAPI):
    """ninja's API, its document completed by `document_conditions`."""

    def get_openapi_schema(self, **kwargs: Any) -> OpenAPISchema:
        schema = super().get_openapi_schema(**kwargs)
        document_conditions(schema["paths"])
        return schema


def _answers_object(response: dict[str, Any]) -> bool:
    body = response.get("content", {}).get("application/json", {}).get("schema", {})
    return "$ref" in body and body["$ref"] not in NOT_OBJECT_REFS


def document_conditions(paths: dict[str, dict[str, Any]]) -> None:
    """ETag on object answers, If-None-Match and 304 on object GETs, If-Match and 412 on the
    writes to an object that can be read (its own path, or the one a POST is under)."""
    readable = {
        path
        for path, operations in paths.items()
        if _answers_object(operations.get("get", {}).get("responses", {}).get(200, {}))
    }
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation.get("responses", {})
            for status, response in responses.items():
                if str(status).startswith("2") and _answers_object(response):
                    response.setdefault("headers", {})["ETag"] = ETAG
            parameters = operation.setdefault("parameters", [])
            if method == "get" and path in readable:
                parameters.append(IF_NONE_MATCH)
                responses[304] = {"description": "Not Modified: the object still has that ETag."}
            target = path.rsplit("/", 1)[0] if method == "post" else path
            if method in ("post", "put", "patch", "delete") and target in readable:
                parameters.append(IF_MATCH)
                responses[412] = PRECONDITION_FAILED
