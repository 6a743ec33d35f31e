"""The worker's side of an image import: download to a hidden file of the project's images folder
while recording progress, then check and register it as uploads are. Whatever ends it early
(an error, a cancel, the sweep of a dead worker's import) removes that file."""

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import requests
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from instances import url_fetch
from instances.backends.base import BackendError
from instances.backends.qemu.formats import FORMAT_NAMES
from instances.backends.qemu.images import QemuImg
from instances.choices import ImageKind, ImportFormat, ImportStatus
from instances.import_pace import Pace
from instances.models import ImageImport
from instances.services.image_quota import image_import_hold
from instances.services.images import image_folder, image_register_file, image_size_refusal
from instances.services.import_slots import image_imports_dispatch, image_imports_dispatch_all

log = logging.getLogger(__name__)
PROGRESS_SECONDS = 0.5  # how often the progress record is written (and a cancel noticed)
HEARTBEAT_SECONDS = 2
HOLD_AHEAD = 64 * 1024 * 1024  # quota held ahead of a download of unknown size
STALE_SECONDS = 60  # an import's worker silent this long has stopped (beats come every 2 s)
FIELDS = {"url": "url", "sha256": "sha256", "name": "name", "file": "url"}


class Cancelled(Exception):
    """The import was cancelled (or retried anew) while it ran."""


def part_file(image_import: ImageImport) -> Path:
    return image_folder(image_import.project) / f".import-{image_import.pk}.part"


def image_import_run(import_id: int, attempt: int) -> None:
    """1. claim the queued attempt (a message sent again finds it claimed and stops);
    2. download, counting and hashing; 3. compare the checksum; 4. convert a raw disk;
    5. check and register the file as an upload is."""
    claimed = ImageImport.objects.filter(  # one waiting for a slot was never sent: not claimed
        pk=import_id, attempt=attempt, status=ImportStatus.QUEUED, sent_at__isnull=False
    ).update(status=ImportStatus.RUNNING, heartbeat_at=timezone.now())
    if not claimed:
        return
    image_import = ImageImport.objects.select_related("project", "created_by").get(pk=import_id)
    try:
        _run(image_import)
    finally:  # its slot is free: the project's next waiting import goes
        image_imports_dispatch(image_import.project_id)


def _run(image_import: ImageImport) -> None:
    import_id = image_import.pk
    part = part_file(image_import)
    converted = part.with_suffix(".qcow2")
    try:
        with _beating(image_import) as transfer:
            digest = _download(image_import, part, transfer)
            if image_import.sha256 and digest != image_import.sha256:
                raise url_fetch.FetchError(
                    f"The file's SHA-256 is {digest}, not {image_import.sha256}: check the "
                    "checksum (or the address, if the file is not the one meant).",
                    field="sha256",
                )
            received = part
            if image_import.format == ImportFormat.RAW:
                _convert_raw(part, converted)
                received = converted
            kind = ImageKind.ISO if image_import.format == ImportFormat.ISO else ImageKind.QCOW2
            image = image_register_file(
                project=image_import.project, actor=image_import.created_by,
                name=image_import.name, kind=kind, os_type=image_import.os_type,
                description=image_import.description, received=received, action="image.imported",
                import_id=import_id,
            )  # fmt: skip
    except Cancelled:
        _settle(image_import, ImportStatus.CANCELLED, "Cancelled.", "", part, converted)
    except url_fetch.FetchError as error:
        _settle(image_import, ImportStatus.FAILED, error.message, error.field, part, converted)
    except ValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        _settle(image_import, ImportStatus.FAILED, messages[0], FIELDS.get(field, "url"), part,
                converted)  # fmt: skip
    except BaseException:
        log.exception("image import %s", import_id)
        _settle(image_import, ImportStatus.FAILED, "The import failed unexpectedly: retry it; "
                "the worker's log says more.", "url", part, converted)  # fmt: skip
        raise
    else:
        if not _mine(image_import).update(
            status=ImportStatus.DONE, image=image, finished_at=timezone.now(), message=""
        ):  # cancelled at the last moment: the image is registered already, and stays
            ImageImport.objects.filter(pk=import_id).update(
                status=ImportStatus.DONE, image=image, finished_at=timezone.now()
            )


def image_imports_sweep() -> None:
    """Imports whose worker stopped beating (it was killed, its host rebooted) are marked
    interrupted, or cancelled if a cancel was asked, and their part files removed; the imports
    waiting behind them go."""
    stale = timezone.now() - timedelta(seconds=STALE_SECONDS)
    dead = ImageImport.objects.select_related("project").filter(
        status__in=(ImportStatus.RUNNING, ImportStatus.CANCELLING), heartbeat_at__lt=stale
    )
    for image_import in dead:
        if image_import.status == ImportStatus.CANCELLING:
            status, message = ImportStatus.CANCELLED, "Cancelled."
        else:
            status, message = (
                ImportStatus.FAILED,
                (
                    f"Interrupted: the worker stopped during the import, after "
                    f"{image_import.bytes_done} bytes. Retry it."
                ),
            )
        part = part_file(image_import)
        _settle(image_import, status, message, "url", part, part.with_suffix(".qcow2"),
                when=image_import.status)  # fmt: skip
    image_imports_dispatch_all()


def _mine(image_import: ImageImport):  # type: ignore[no-untyped-def]
    return ImageImport.objects.filter(pk=image_import.pk, attempt=image_import.attempt)


def _download(image_import: ImageImport, part: Path, transfer: "Transfer") -> str:
    """The file into `part`, its progress recorded; its SHA-256 in hex."""
    within = url_fetch.limits()
    digest = hashlib.sha256()
    project, pk = image_import.project, image_import.pk
    pace = transfer.pace = Pace(urlsplit(image_import.url).hostname or image_import.url)
    with url_fetch.url_opened(image_import.url, within) as response:
        transfer.response = response
        total = url_fetch.content_length(response)
        if total is not None and (message := image_size_refusal(project, total, import_id=pk)):
            raise url_fetch.FetchError(message)
        held = _hold(image_import, total) if total is not None else 0
        _mine(image_import).update(bytes_total=total)
        done, rate = 0, 0.0
        mark_time, mark_done = time.monotonic(), 0
        with part.open("wb") as out, _pace_told(pace):
            for chunk in url_fetch.chunks(response, within):
                pace.arrived(len(chunk))
                done += len(chunk)
                if total is not None and done > total:
                    raise url_fetch.FetchError(
                        f"The server sent more than the {total} bytes it announced: try "
                        "another mirror."
                    )
                if done > held:  # no size announced: held as it arrives, before it is kept
                    held = _hold(image_import, done, ahead=HOLD_AHEAD)
                out.write(chunk)
                digest.update(chunk)
                now = time.monotonic()
                if now - mark_time >= PROGRESS_SECONDS:
                    if message := image_size_refusal(project, done, import_id=pk):
                        raise url_fetch.FetchError(message)
                    recent = (done - mark_done) / (now - mark_time)
                    rate = recent if not rate else 0.5 * rate + 0.5 * recent
                    mark_time, mark_done = now, done
                    _progress(image_import, done, rate)
        if message := image_size_refusal(project, done, import_id=pk):
            raise url_fetch.FetchError(message)
        _progress(image_import, done, rate)
    return digest.hexdigest()


def _hold(image_import: ImageImport, size: int, ahead: int = 0) -> int:
    """Hold `size` bytes of the project's quota for the import (`ahead` more when they fit, so
    a file of unknown size takes the lock now and then); FetchError when `size` does not fit."""
    held, message = image_import_hold(image_import=image_import, size=size, ahead=ahead)
    if message:
        raise url_fetch.FetchError(message)
    return held


def _progress(image_import: ImageImport, done: int, rate: float) -> None:
    if (
        not _mine(image_import)
        .filter(status=ImportStatus.RUNNING)
        .update(bytes_done=done, rate=int(rate), heartbeat_at=timezone.now())
    ):
        raise Cancelled


def _convert_raw(part: Path, converted: Path) -> None:
    """A raw disk as qcow2; a file that is some other format, or no disk, is refused."""
    qemu_img = QemuImg()
    try:
        probed = str(qemu_img.probe(part)["format"])
        if probed != "raw":
            raise url_fetch.FetchError(
                f"This file is {FORMAT_NAMES[probed]}, not a raw disk: import it as {probed}."
                if probed in ImportFormat.values
                else f"This file is {FORMAT_NAMES[probed]}, not a raw disk: convert it to qcow2."
            )
        if part.stat().st_size % 512:
            raise url_fetch.FetchError(
                "This is not a raw disk image (its size is not a whole number of 512-byte "
                "sectors): check the address, or choose the file's own format."
            )
        qemu_img.convert_raw(part, converted)
    except BackendError as error:
        raise url_fetch.FetchError(error.message) from None
    part.unlink(missing_ok=True)


def _settle(
    image_import: ImageImport,
    status: str,
    message: str,
    field: str,
    *files: Path,
    when: str = ImportStatus.RUNNING,
) -> None:
    for file in files:
        file.unlink(missing_ok=True)
    query = ImageImport.objects.filter(pk=image_import.pk, attempt=image_import.attempt)
    if when == ImportStatus.RUNNING:  # a cancel asked meanwhile ends it as cancelled
        query.filter(status=ImportStatus.CANCELLING).update(
            status=ImportStatus.CANCELLED, message="Cancelled.", finished_at=timezone.now()
        )
    query.filter(status=when).update(
        status=status, message=message, error_field=field if status == "failed" else "",
        finished_at=timezone.now(),
    )  # fmt: skip


@contextmanager
def _pace_told(pace: Pace) -> Iterator[None]:
    """A download cut at its deadline (by the heartbeat) fails saying so, not as cut short."""
    try:
        yield
    except url_fetch.FetchError:
        pace.check_deadline()
        raise
    pace.check_deadline()


class Transfer:
    """The response being read, which the heartbeat cuts when a cancel comes in or the import's
    deadline passes while the server sends nothing (the reading thread waits in the socket)."""

    response: requests.Response | None = None
    pace: Pace | None = None


@contextmanager
def _beating(image_import: ImageImport) -> Iterator[Transfer]:
    """A heartbeat on the record while the import runs, also through long checks, so the sweep
    tells a dead worker's import from a slow one; it also notices a cancel."""
    stop, transfer = threading.Event(), Transfer()

    def beat() -> None:
        try:
            while not stop.wait(HEARTBEAT_SECONDS):
                mine = _mine(image_import)
                mine.update(heartbeat_at=timezone.now())
                if transfer.response is None:
                    continue
                late = transfer.pace is not None and time.monotonic() >= transfer.pace.deadline_at
                if late or not mine.filter(status=ImportStatus.RUNNING).exists():
                    url_fetch.cut(transfer.response)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, daemon=True, name=f"import-{image_import.pk}")
    thread.start()
    try:
        yield transfer
    finally:
        stop.set()
        thread.join()
