"""The pace an image import must keep: an overall deadline and a minimum rate over each window
(ZOPDAY_IMPORT_DEADLINE_SECONDS, ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND over
ZOPDAY_IMPORT_RATE_WINDOW_SECONDS), so a server that drips bytes cannot hold a worker for hours."""

import time

from django.conf import settings

from instances.url_fetch import FetchError


class Pace:
    """Told of each arrival; FetchError, saying which limit, when the import falls behind."""

    def __init__(self, host: str, started: float | None = None) -> None:
        self.host = host
        self.started = time.monotonic() if started is None else started
        self.deadline = float(settings.ZOPDAY_IMPORT_DEADLINE_SECONDS)
        self.min_rate = float(settings.ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND)
        self.window = float(settings.ZOPDAY_IMPORT_RATE_WINDOW_SECONDS)
        self.window_start, self.window_bytes = self.started, 0

    @property
    def deadline_at(self) -> float:
        return self.started + self.deadline

    def arrived(self, size: int) -> None:
        self.window_bytes += size
        now = time.monotonic()
        self.check_deadline(now)
        elapsed = now - self.window_start
        if self.min_rate and elapsed >= self.window:
            rate = self.window_bytes / elapsed
            if rate < self.min_rate:
                raise FetchError(
                    f"{self.host} sent {rate:.0f} bytes/s over the last {elapsed:.0f} s, below "
                    f"the minimum of {self.min_rate:.0f} bytes/s an import must keep up: try "
                    "again later, or another mirror."
                )
            self.window_start, self.window_bytes = now, 0

    def check_deadline(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now >= self.deadline_at:
            raise FetchError(
                f"The import took longer than {self.deadline:.0f} s, the longest an import may "
                f"take, and {self.host} had not sent the whole file: try again later, or "
                "another mirror."
            )
