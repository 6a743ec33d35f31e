"""The API's base types: what no service should see (NUL characters, lone surrogates, numbers
no column holds) is kept out here; checks of meaning stay in the services."""

from typing import Annotated

from ninja import Field, Schema
from pydantic import AfterValidator, ConfigDict
from pydantic_core import PydanticCustomError


def _storable(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "Text cannot contain NUL (0x00) characters.")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise PydanticCustomError("text_unicode", "Text must be valid Unicode.") from None
    return value


Text = Annotated[str, AfterValidator(_storable)]
Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
Number = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Slug = Annotated[str, Field(pattern=r"^[-a-zA-Z0-9_]+$", max_length=50)]


class In(Schema):
    """A request body: a field it does not know is refused, not ignored (a misspelt name would
    otherwise leave its setting at the default)."""

    model_config = ConfigDict(extra="forbid")
