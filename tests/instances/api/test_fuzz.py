"""Schema-driven fuzzing: schemathesis feeds every operation of the OpenAPI document generated
input (valid and invalid) as an operator of a seeded project, and no answer may be a 5xx.

A fixed seed and a small budget keep it repeatable and quick. It runs against the WSGI app in
this process, inside the test's transaction: power actions only claim their transition and the
tasks queued on commit never leave (the transaction is rolled back at the end).
"""

import logging

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from instances.services.instances import instance_create
from instances.services.keys import ssh_key_add
from instances.services.network import eip_allocate
from instances.services.storage import disk_create
from instances.services.tokens import api_token_create
from tests.factories import instance_request
from tests.instances.api.helpers import public_key

pytestmark = pytest.mark.django_db

# 20 requests per operation: 10 of valid input, 10 of input the schema forbids.
FUZZ_SETTINGS = settings(
    max_examples=10,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.generate],  # no shrinking: the first failing request is reported as it is
)


@pytest.fixture
def seeded(project, operator, subnet, image):
    """A token of the operator, and the ids of one object of each kind to aim the paths at."""
    instance = instance_create(
        project=project, actor=operator, request=instance_request(subnet, image)
    )
    disk = disk_create(project=project, actor=operator, name="data", zone="local-1a", size_gb=2)
    eip = eip_allocate(project=project, actor=operator)
    key = ssh_key_add(project=project, actor=operator, name="laptop", public_key=public_key())
    _, token = api_token_create(user=operator, name="fuzz")
    return {
        "token": token,
        "path": {
            "slug": project.slug,
            "instance_id": instance.pk,
            "subnet_id": subnet.pk,
            "disk_id": disk.pk,
            "nic_id": instance.nics.get().pk,
            "eip_id": eip.pk,
            "key_id": key.pk,
        },
    }


@pytest.fixture
def api_schema(seeded):
    # The app runs in this thread on the test's connection: keep Django from closing it after
    # each request, as its own test client does.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    # A thousand 4xx warnings say nothing; a 500 still logs its traceback as an error.
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.ERROR)
    yield schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    request_log.setLevel(level)
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# schemathesis' own pytest integration (schema.parametrize) does not run under pytest 9 yet, so
# the test drives Hypothesis itself: one strategy per operation and generation mode.
def test_no_operation_answers_a_server_error(api_schema, seeded):
    headers = {"Authorization": f"Bearer {seeded['token']}"}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 25
    failures = [
        failure
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if (failure := first_server_error(operation, mode, seeded["path"], headers))
    ]
    assert failures == []


class ServerError(AssertionError):
    pass


def first_server_error(operation, mode, path_ids, headers) -> str | None:
    """The first request of this operation and mode answered 5xx, as a curl command."""
    path_parameters = {
        name: value for name, value in path_ids.items() if f"{{{name}}}" in operation.path
    }

    @given(case=operation.as_strategy(mode, path_parameters=path_parameters))
    @FUZZ_SETTINGS
    def probe(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        if response.status_code >= 500:
            raise ServerError(f"{operation.label} ({mode.value}): {case.as_curl_command()}")

    try:
        probe()
    except ServerError as error:
        return str(error)
    return None
