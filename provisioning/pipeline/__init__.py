"""The pipeline: its steps (`steps`), the runner that claims and runs them (`runner`) and the
batched writes of a running step (`writer`)."""

from provisioning.pipeline.runner import (
    append_steps,
    job_advance,
    job_advance_for,
    job_run_inline,
    jobs_resume_stalled,
    queue_advance,
)
from provisioning.pipeline.steps import LB_STEPS, steps_for

__all__ = [
    "LB_STEPS",
    "append_steps",
    "job_advance",
    "job_advance_for",
    "job_run_inline",
    "jobs_resume_stalled",
    "queue_advance",
    "steps_for",
]
