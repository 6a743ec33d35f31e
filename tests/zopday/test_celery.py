import pytest
from django.conf import settings

from zopday.celery import ping

pytestmark = pytest.mark.integration


def test_a_task_goes_through_redis_to_a_real_worker_and_back(celery_worker_process):
    assert not getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False)
    result = ping.delay()
    assert result.get(timeout=30) == {
        "pong": result.result["pong"],
        "pid": celery_worker_process.pid,
    }
    assert result.state == "SUCCESS"
