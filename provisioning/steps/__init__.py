"""The pipeline's step functions, registered under the seed's names (see provisioning.pipeline).

Each is small and idempotent: the provider looks its resources up by tag or name before
creating them and records ids in the job's InfraConfig.
"""

from provisioning.steps import provision, teardown

__all__ = ["provision", "teardown"]
