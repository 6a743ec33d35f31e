"""The pipeline's step functions, registered under the seed's names (see provisioning.pipeline).

Each is small and idempotent: the provider looks its resources up by tag or name before
creating them and records ids in the job's InfraConfig. Only a step's first attempt skips the
lookups (nothing can exist yet); a retry, or a re-run after a worker died mid-step, always makes
them.
"""

from provisioning.steps import provision, teardown

__all__ = ["provision", "teardown"]
