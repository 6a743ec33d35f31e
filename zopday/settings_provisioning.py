"""The provisioning app's settings, read from the environment (zopday.settings takes them in)."""

from zopday.envvars import env, envint, envlist, run_dir


def _generated_secrets_key() -> str:
    """A Fernet key generated once into the run folder; it encrypts cloud account secrets."""
    from cryptography.fernet import Fernet

    path = run_dir() / "secrets_key"
    if not path.exists():
        path.write_bytes(Fernet.generate_key())
        path.chmod(0o600)
    return path.read_text().strip()


# Encrypts cloud account secrets at rest. Set it in production and keep it: losing it makes
# every stored secret unreadable.
ZOPDAY_SECRETS_KEY = env("ZOPDAY_SECRETS_KEY") or _generated_secrets_key()
# Hosts (name or name:port) a project admin may point a cloud account's endpoint URL at; any
# other endpoint is a superuser's setting (provisioning.endpoints).
ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST = envlist("ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST", [])
# How long Test connection waits for the cloud's answer (a page waits for it).
ZOPDAY_CLOUD_CHECK_TIMEOUT = envint("ZOPDAY_CLOUD_CHECK_TIMEOUT", 10)
# A pipeline step retries a transient cloud error this many times, backing off from BASE seconds.
ZOPDAY_PROVISIONING_RETRY_ATTEMPTS = envint("ZOPDAY_PROVISIONING_RETRY_ATTEMPTS", 5)
ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS = float(env("ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS", "1"))
# A running step holds a lease it renews while it works; a step whose worker died is taken over
# once the lease has run out.
ZOPDAY_PROVISIONING_LEASE_SECONDS = envint("ZOPDAY_PROVISIONING_LEASE_SECONDS", 120)
# How long stepCreateVMs waits for the bootstrap sentinel on every VM, and how often it asks.
ZOPDAY_PROVISIONING_READY_TIMEOUT = envint("ZOPDAY_PROVISIONING_READY_TIMEOUT", 900)
ZOPDAY_PROVISIONING_POLL_SECONDS = float(env("ZOPDAY_PROVISIONING_POLL_SECONDS", "5"))
# The Celery queue pipeline steps go to (the default queue, which every worker consumes).
ZOPDAY_PROVISIONING_QUEUE = env("ZOPDAY_PROVISIONING_QUEUE", "celery")
# A worker runs a job's steps back to back for up to this long, then queues the rest.
ZOPDAY_PROVISIONING_SLICE_SECONDS = float(env("ZOPDAY_PROVISIONING_SLICE_SECONDS", "2"))
# A step may wait for an auto scaling group to fill (up to 15 min), then for the sentinel
# (READY_TIMEOUT): the task that runs it must outlive both, or its clear timeout message is lost.
ZOPDAY_PROVISIONING_TASK_TIME_LIMIT = envint(
    "ZOPDAY_PROVISIONING_TASK_TIME_LIMIT", ZOPDAY_PROVISIONING_READY_TIMEOUT + 1800
)
# How often the state of provisioned VMs is read back from the cloud (a VM stopped or terminated
# outside the console shows on its instance and in its job within this many seconds).
ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS = envint("ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS", 30)
