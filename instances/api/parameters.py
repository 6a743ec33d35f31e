"""Query parameters an endpoint does not know are refused (400), as unknown body fields are: a
misspelt `page_size` or an unsupported `limit` would otherwise be silently ignored."""

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from ninja.operation import Operation

from instances.api.errors import respond, summary
from instances.api.mistakes import request_mistakes

Run = Callable[..., HttpResponseBase]


def accepted_parameters(operation: Operation) -> list[str]:
    names: list[str] = []
    for model in operation.models:
        if model.__ninja_param_source__ == "query":
            names.extend(getattr(model, "__ninja_flatten_map__", None) or model.model_fields)
    return sorted(names)


def unknown_refused(run: Run) -> Run:
    """ninja's view decorator for every operation: unknown query parameters get 400, once the
    caller is known, with every other mistake of the request (mistakes.py) in the same answer."""
    operation: Operation = inspect.unwrap(run).__self__  # type: ignore[attr-defined]
    accepted = accepted_parameters(operation)
    if accepted:
        message = (
            f"This query parameter is unknown here: the accepted ones are {', '.join(accepted)}."
        )
    else:
        message = "This query parameter is unknown here: this endpoint takes none."

    @wraps(run)
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        unknown = [name for name in request.GET if name not in accepted]
        if not unknown:
            return run(request, **kwargs)
        refused = operation._run_checks(request)  # who asks (401, 403, 429) comes first
        if refused is not None:
            return refused
        try:
            errors = request_mistakes(operation, request, kwargs)
        except Exception as error:  # a body that cannot be read says so, as without the query
            return operation.api.on_exception(request, error)
        errors |= {name: [message] for name in unknown}
        return respond(operation.api, request, 400, summary(errors), errors)

    return view
