"""What the console's log shows of requests it refuses."""

import io
import logging

import pytest
from django.urls import reverse

from zopday.logfilters import RefusalsWithoutTraceback

pytestmark = pytest.mark.django_db


def test_a_refused_request_logs_one_line_without_a_traceback(client_for, project):
    console = next(
        handler
        for handler in logging.getLogger().handlers
        if any(isinstance(f, RefusalsWithoutTraceback) for f in handler.filters)
    )
    assert isinstance(console, logging.StreamHandler)
    stream = io.StringIO()
    before = console.setStream(stream)
    try:
        response = client_for("viewer").get(reverse("instance-new", args=[project.slug]))
    finally:
        console.setStream(before)
    assert response.status_code == 403
    logged = stream.getvalue()
    assert "WARNING django.request: Forbidden (Permission denied): /projects/alpha/" in logged
    assert "Traceback" not in logged and len(logged.splitlines()) == 1
