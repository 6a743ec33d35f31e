"""Names unique in a project, with a clash reported at the name field."""

from collections.abc import Collection
from typing import Any, ClassVar

from django.core.exceptions import ValidationError


class NamedInProject:
    """A model with a UniqueConstraint on (project, name): full_clean() says a taken name at the
    `name` field, in the model's own words, instead of Django's "... with this Project and Name
    already exists." for the whole form."""

    name_taken: ClassVar[str]  # "A disk named {name} already exists in this project: ..."
    skipped_constraint_fields: ClassVar[tuple[str, ...]] = ()  # checked in clean() instead

    def validate_constraints(self, exclude: Collection[str] | None = None) -> None:
        exclude = set(exclude or ()) | set(self.skipped_constraint_fields)
        errors: dict[str, Any] = {}
        if "name" not in exclude:
            model: Any = type(self)
            this: Any = self
            clash = model._default_manager.filter(project_id=this.project_id, name=this.name)
            if clash.exclude(pk=this.pk).exists():
                errors["name"] = [
                    ValidationError(self.name_taken.format(name=this.name), code="name_taken")
                ]
            exclude.add("name")
        try:
            super().validate_constraints(exclude=exclude)  # type: ignore[misc]
        except ValidationError as error:
            errors = error.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)
