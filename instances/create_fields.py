"""An instance's create fields are declared once, in the API's schemas (InstanceIn, DiskIn, NicIn):
an `OnForm` mark on a field says how the create form shows it, and `form_fields_of` puts the
marked fields on a form class, so the form and the API cannot drift apart."""

import enum
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from django import forms
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

F = TypeVar("F", bound=type[forms.Form])


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it holds lists
class OnForm:
    """How the create form shows a schema field (the form's own limits: the services check)."""

    label: str | None = None
    help_text: str = ""
    widget: type[forms.Widget] | forms.Widget | None = None
    choices: Sequence[tuple[Any, Any]] | Callable[[], Sequence[tuple[Any, Any]]] | None = None
    initial: object = None
    min_value: int | None = None
    max_value: int | None = None
    max_length: int | None = None
    validators: Sequence[Callable[[Any], None]] = ()


def zone_choices() -> list[tuple[str, str]]:
    from instances.models.clusters import all_zones

    return [(zone, zone) for zone in all_zones()]


def cluster_choices() -> list[tuple[str, str]]:
    """Where an instance runs: this console's own hosts, or one of the clusters."""
    from instances.models import Cluster

    clusters = Cluster.objects.values_list("name", flat=True)
    return [("", "This console's hosts (QEMU)")] + [
        (name, f"Cluster {name} (KubeVirt)") for name in clusters
    ]


def form_fields_of(schema: type[BaseModel]) -> Callable[[F], F]:
    """Class decorator: the form gets the schema's marked fields, in the schema's order; a field
    the form declares itself (a model picker for an id) wins."""

    def decorate(form_class: F) -> F:
        fields = _form_fields(schema) | form_class.declared_fields  # type: ignore[attr-defined]
        order = dict.fromkeys([*schema.model_fields, *fields])
        form_class.base_fields = form_class.declared_fields = {  # type: ignore[attr-defined]
            name: fields[name] for name in order if name in fields
        }
        return form_class

    return decorate


def _form_fields(schema: type[BaseModel]) -> dict[str, forms.Field]:
    fields = {}
    for name, info in schema.model_fields.items():
        mark = next((item for item in info.metadata if isinstance(item, OnForm)), None)
        if mark is not None:
            fields[name] = _form_field(_base_type(info.annotation), info.default, mark)
    return fields


def _form_field(kind: Any, default: object, mark: OnForm) -> forms.Field:
    options: dict[str, Any] = {"help_text": mark.help_text, "validators": list(mark.validators)}
    if mark.label is not None:
        options["label"] = mark.label
    if mark.widget is not None:
        options["widget"] = mark.widget
    if kind is bool:
        return forms.BooleanField(required=False, **options)
    # a field with a real default always has a value on the page: required there
    options["required"] = default is PydanticUndefined or default not in (None, "")
    initial = mark.initial if mark.initial is not None else default
    if initial is not PydanticUndefined and initial not in (None, ""):
        options["initial"] = initial
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return forms.ChoiceField(choices=mark.choices or kind.choices, **options)  # type: ignore[attr-defined]
    if mark.choices is not None:
        if kind is int:
            return forms.TypedChoiceField(choices=mark.choices, coerce=int, **options)
        return forms.ChoiceField(choices=mark.choices, **options)
    if kind is int:
        return forms.IntegerField(min_value=mark.min_value, max_value=mark.max_value, **options)
    return forms.CharField(max_length=mark.max_length, **options)


def _base_type(annotation: Any) -> Any:
    """int for `Annotated[int, ...] | None`: the type a form field is made for."""
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation
