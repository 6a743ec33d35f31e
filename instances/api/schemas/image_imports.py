"""Bodies of image imports from a URL."""

from datetime import datetime

from ninja import Field, Schema

from instances.api.schemas.base import In, Text
from instances.choices import ImportFormat, ImportStatus, OsType
from instances.models import ImageImport


class ImageImportIn(In):
    name: Text
    format: Text = Field(description="qcow2, raw (converted to qcow2) or iso.")
    url: Text = Field(description="An http:// or https:// address of the file.")
    sha256: Text = Field("", description="Optional SHA-256 of the file, checked on arrival.")
    os_type: Text = OsType.LINUX
    description: Text = ""


class ImageImportOut(Schema):
    id: int
    name: str
    format: ImportFormat
    url: str = Field(description="The address, its login and signature parameters hidden.")
    sha256: str
    status: ImportStatus
    waiting: bool = Field(description="Queued behind the project's other imports under way.")
    bytes_done: int
    bytes_total: int | None
    rate: int = Field(description="Bytes per second, lately.")
    seconds_left: int | None
    message: str
    error_field: str = Field(description="The field the message is about: url or sha256.")
    image_id: int | None
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_url(image_import: ImageImport) -> str:
        return image_import.shown_url
