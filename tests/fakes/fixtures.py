"""pytest fixtures of the Compute Engine fake: one server per session, a clean one per test."""

from collections.abc import Iterator

import pytest

from tests.fakes.gce import FakeGce


@pytest.fixture(scope="session")
def gce_server() -> Iterator[FakeGce]:
    fake = FakeGce(project="zopday-sandbox")
    yield fake
    fake.stop()


@pytest.fixture
def gce(gce_server: FakeGce) -> Iterator[FakeGce]:
    """The fake with no resources, booting and bootstrapping in a few hundredths of a second."""
    gce_server.reset()
    gce_server.configure(step_seconds=0.02, bootstrap_seconds=0.05)
    yield gce_server
