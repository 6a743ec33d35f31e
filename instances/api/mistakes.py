"""Every mistake of a request at once: a JSON body off the schema is read leniently (each field
that does not parse at its default or a blank), the endpoint runs on it in a transaction that is
always rolled back, and the meaning errors it finds join the schema errors at their fields."""

import copy
import inspect
import logging
from collections.abc import Callable
from functools import cache, wraps
from typing import Annotated, Any, get_args, get_origin

from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponseBase
from ninja.errors import HttpError
from ninja.errors import ValidationError as SchemaValidationError
from ninja.operation import Operation
from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from pydantic.fields import FieldInfo

from instances.api.errors import respond, schema_errors, summary

logger = logging.getLogger(__name__)
Run = Callable[..., HttpResponseBase]
BLANKS: dict[Any, Any] = {str: "", int: 0, bool: False, list: [], dict: {}}


def takes_json(operation: Operation) -> bool:
    """A JSON body, and no form or file: an upload is stored as it is read, so never rehearsed."""
    sources = {model.__ninja_param_source__ for model in operation.models}
    return "body" in sources and not sources & {"form", "file"}


def every_mistake(run: Run) -> Run:
    """ninja's view decorator for every operation: a body off the schema is answered with its
    meaning errors too, once the caller is known (401, 403, 404 come first)."""
    operation: Operation = inspect.unwrap(run).__self__  # type: ignore[attr-defined]
    if not takes_json(operation):
        return run

    @wraps(run)
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        try:
            operation._get_values(request, kwargs, operation.api.create_temporal_response(request))
        except SchemaValidationError:
            pass
        except Exception:  # a body that cannot be read: answered as without this decorator
            return run(request, **kwargs)
        else:
            return run(request, **kwargs)
        refused = operation._run_checks(request)
        if refused is not None:
            return refused
        try:
            errors = request_mistakes(operation, request, kwargs)
        except Exception as error:
            return operation.api.on_exception(request, error)
        return respond(operation.api, request, 422, summary(errors), errors)

    return view


def request_mistakes(
    operation: Operation, request: HttpRequest, kwargs: dict[str, Any]
) -> dict[str, list[str]]:
    """The request's schema errors and the meaning errors of the fields that parsed, by field
    path; a schema error's field is not reported again for what its placeholder meant."""
    temporal = operation.api.create_temporal_response(request)
    found: dict[str, list[str]] = {}
    try:
        values: dict[str, Any] | None = operation._get_values(request, kwargs, temporal)
    except SchemaValidationError as error:
        found = schema_errors(error)
        values = None if "body" in found else lenient_values(operation, request, kwargs)
        if values is not None and operation.signature.response_arg:
            values[operation.signature.response_arg] = temporal
    if values is None or not takes_json(operation):
        return found
    meaning = rehearsed(operation, request, values)
    return {
        path: messages
        for path, messages in meaning.items()
        if not any(path == bad or path.startswith(f"{bad}-") for bad in found)
    } | found


def rehearsed(
    operation: Operation, request: HttpRequest, values: dict[str, Any]
) -> dict[str, list[str]]:
    """The endpoint's ValidationError for these values, run in a transaction that is rolled back:
    nothing is kept, and work queued on commit is never sent. 404 and 403 are raised."""
    try:
        with transaction.atomic():
            try:
                operation.view_func(request, **values)
            finally:
                transaction.set_rollback(True)
    except DjangoValidationError as error:
        if hasattr(error, "error_dict"):
            return error.message_dict
        return {NON_FIELD_ERRORS: error.messages}
    except (Http404, PermissionDenied, HttpError):
        raise
    except Exception:  # a refusal of state, or a placeholder the endpoint cannot take
        logger.debug("No meaning errors from %s", operation.view_func.__name__, exc_info=True)
    return {}


def lenient_values(
    operation: Operation, request: HttpRequest, kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """The endpoint's arguments with every body field that parsed, or None when a path or
    query parameter is off the schema, or the body is not an object."""
    values: dict[str, Any] = {}
    for model in operation.models:
        if model.__ninja_param_source__ != "body":
            try:
                values.update(model.resolve(request, operation.api, kwargs))
            except PydanticValidationError:
                return None
            continue
        data = model.get_request_data(request, operation.api, kwargs)
        if not isinstance(data, dict):
            return None
        data = model._map_data_paths(data)
        if not all(isinstance(data.get(name), dict) for name in model.model_fields):
            return None
        values.update(dict(lenient(model, data)))
    return values


def lenient(schema: type[BaseModel], data: Any) -> BaseModel:
    """`schema`'s object of `data`, unchecked: each field that does not parse alone is at its
    default (a blank when it has none); nested objects are read the same way."""
    data = data if isinstance(data, dict) else {}
    values = {}
    for name, field in schema.model_fields.items():
        key = field.alias or name
        if key in data:
            values[name] = _field_value(schema, name, field, data[key])
        else:
            values[name] = _fallback(field)
    return schema.model_construct(**values)


def _field_value(schema: type[BaseModel], name: str, field: FieldInfo, value: Any) -> Any:
    model = _model_of(field.annotation)
    if model is not None:
        return lenient(model, value)
    item = _model_of(get_args(field.annotation)[0]) if _is_list(field.annotation) else None
    if item is not None:
        return [lenient(item, each) for each in value] if isinstance(value, list) else []
    try:
        return _adapter(schema, name).validate_python(value)
    except PydanticValidationError:
        return _fallback(field)


def _fallback(field: FieldInfo) -> Any:
    if not field.is_required():
        return field.get_default(call_default_factory=True)
    model = _model_of(field.annotation)
    if model is not None:
        return lenient(model, {})
    origin = get_origin(field.annotation) or field.annotation
    return copy.copy(BLANKS.get(origin))  # a list or dict of its own, for each request


@cache
def _adapter(schema: type[BaseModel], name: str) -> TypeAdapter:
    field = schema.model_fields[name]
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[annotation, *field.metadata]
    return TypeAdapter(annotation)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) is list and len(get_args(annotation)) == 1
