"""Settings for the ZopDay console, read from the environment.

Without any variable set, the console runs on its embedded defaults: SQLite in the run folder, a
private Redis on a unix socket there, and a development secret key generated once into that folder.
Set ZOPDAY_ENV=production for a deployment; `manage.py check --deploy` is then clean as long as
SECRET_KEY, ALLOWED_HOSTS and DATABASE_URL are given.
"""

import os
import secrets
import socket
from datetime import timedelta
from pathlib import Path

import dj_database_url

from zopday.envvars import env, envaddresses, envbool, envint, envlist, envnetworks, run_dir

BASE_DIR = Path(__file__).resolve().parent.parent


# The run folder holds everything the embedded mode creates: database, sockets, keys, images.
RUN_DIR = run_dir()

PRODUCTION = env("ZOPDAY_ENV", "development") == "production"
# Debug pages show tracebacks and settings to whoever sends the request: only when asked for.
DEBUG = envbool("ZOPDAY_DEBUG", default=False)


def _development_secret_key() -> str:
    """Generate a secret key once into the run folder, so sessions survive restarts."""
    path = RUN_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


if PRODUCTION:
    SECRET_KEY = os.environ["SECRET_KEY"]
    ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", [])
else:
    SECRET_KEY = env("SECRET_KEY") or _development_secret_key()
    ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",  # serves the API docs page's assets locally
    "axes",  # counts failed logins and bad API tokens (instances.throttle)
    "csp",  # the Content-Security-Policy header
    "instances",
    "provisioning",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out attempt into its 429
    "instances.disk_full.DiskFullMiddleware",  # a write on a full disk: 503 saying so
]

ROOT_URLCONF = "zopday.urls"
WSGI_APPLICATION = "zopday.wsgi.application"
ASGI_APPLICATION = "zopday.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "instances.context_processors.projects",
            ],
        },
    },
]

# Content-Security-Policy: scripts and styles only from the console's own static files (no inline
# script, no eval); the console pages add the console proxy's websocket origin to connect-src.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Database: PostgreSQL from DATABASE_URL, else SQLite in WAL mode inside the run folder.
if env("DATABASE_URL"):
    DATABASES = {
        "default": dj_database_url.parse(
            env("DATABASE_URL"), conn_max_age=60, conn_health_checks=True
        )
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(RUN_DIR / "db.sqlite3"),
            "CONN_MAX_AGE": 60,  # workers too: reconnecting reruns the PRAGMAs on every task
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # A file, not memory, so that worker processes started by tests see the same data.
            "TEST": {"NAME": str(RUN_DIR / "test.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "instances.throttle.LoginThrottle",
    "django.contrib.auth.backends.ModelBackend",
]
# Logins and API tokens (instances.throttle): after this many failures of one user name from one
# address, that pair is refused for the cool-off (bad tokens count per address).
AXES_FAILURE_LIMIT = envint("ZOPDAY_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=envint("ZOPDAY_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # a user or token, from one address
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # the time to retry that is told holds
AXES_LOCKOUT_CALLABLE = "instances.throttle.lockout_response"
AXES_VERBOSE = False
AXES_HANDLER = "instances.throttle.LoginRecords"  # logins on a full disk still get in
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = RUN_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION

# Redis: REDIS_URL, else the private redis-server that `bin/zop run` starts on a unix socket.
REDIS_SOCKET = RUN_DIR / "redis.sock"
REDIS_URL = env("REDIS_URL") or f"redis+socket://{REDIS_SOCKET}"

CELERY_BROKER_URL = REDIS_URL
# Whether this process's Celery workers relay the outbox (what a broker missed) to that broker:
# every worker does by default; a worker on another broker than its database's must not.
ZOPDAY_OUTBOX_RELAY = envbool("ZOPDAY_OUTBOX_RELAY", default=True)
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = envint("ZOPDAY_TASK_TIME_LIMIT", 600)
CELERY_TASK_SOFT_TIME_LIMIT = envint("ZOPDAY_TASK_SOFT_TIME_LIMIT", 540)
CELERY_RESULT_EXPIRES = 3600
# Tasks are fire and forget: their rows in the database are the record. A stored result costs the
# worker two Redis calls and the sender a pub/sub subscription it would never read; a task whose
# caller waits for its answer says ignore_result=False.
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Database connections outlive a task; zopday.celery closes the old and broken ones.
CELERY_DB_REUSE_MAX = 1_000_000
# How often each host asks the guest agents of its running instances (services.guest_reports).
ZOPDAY_GUEST_REPORT_SECONDS = envint("ZOPDAY_GUEST_REPORT_SECONDS", 30)
# Git sources: fetched every POLL_SECONDS (and on a webhook) into DIR, from URL_SCHEMES only.
ZOPDAY_GITOPS_POLL_SECONDS = envint("ZOPDAY_GITOPS_POLL_SECONDS", 60)
ZOPDAY_GITOPS_DIR = Path(env("ZOPDAY_GITOPS_DIR", str(RUN_DIR / "gitops"))).resolve()
ZOPDAY_GITOPS_URL_SCHEMES = envlist("ZOPDAY_GITOPS_URL_SCHEMES", ["https", "ssh"])
ZOPDAY_GITOPS_GIT_SECONDS = envint("ZOPDAY_GITOPS_GIT_SECONDS", 120)
ZOPDAY_GITOPS_DELIVERY_DAYS = envint("ZOPDAY_GITOPS_DELIVERY_DAYS", 7)  # a replay refused so long
# The run-strategy reconciler: the database follows what hypervisors report within seconds.
CELERY_BEAT_SCHEDULE = {
    "reconcile-instances": {
        "task": "instances.reconcile",
        "schedule": float(envint("ZOPDAY_RECONCILE_SECONDS", 3)),
        "options": {"expires": 10},
    },
    "guest-reports": {
        "task": "instances.guest_reports",
        "schedule": float(ZOPDAY_GUEST_REPORT_SECONDS),
        "options": {"expires": ZOPDAY_GUEST_REPORT_SECONDS},
    },
    "gitops-poll": {"task": "instances.gitops_poll", "schedule": ZOPDAY_GITOPS_POLL_SECONDS},
}

# Node-local work (a QEMU process on this host) goes to this host's own queue.
ZOPDAY_HOST = env("ZOPDAY_HOST", socket.gethostname())
# Work on cloud VMs (power operations are API calls) goes to the queue every worker consumes.
ZOPDAY_CLOUD_QUEUE = env("ZOPDAY_CLOUD_QUEUE", "celery")

# Instances: availability zones, the hypervisor backend's options and the Elastic IP pool.
ZOPDAY_ZONES = envlist("ZOPDAY_ZONES", ["local-1a", "local-1b"])
# The DNS resolvers guests are given on a subnet that names none of its own.
ZOPDAY_DNS_RESOLVERS = envaddresses(
    "ZOPDAY_DNS_RESOLVERS", ["1.1.1.1", "9.9.9.9"], example="1.1.1.1,9.9.9.9"
)
ZOPDAY_QEMU_ACCEL = env("ZOPDAY_QEMU_ACCEL", "tcg")  # "kvm:tcg" where KVM guests work
ZOPDAY_NETWORK_MODE = env("ZOPDAY_NETWORK_MODE", "auto")  # auto | bridge | user
ZOPDAY_NETNS = env("ZOPDAY_NETNS", "zopday")  # the network namespace that holds subnet bridges
ZOPDAY_IMAGES_DIR = Path(env("ZOPDAY_IMAGES_DIR", str(RUN_DIR / "images"))).resolve()
# The largest image a user may upload on the Images page or through the API.
ZOPDAY_IMAGE_UPLOAD_MAX_GB = envint("ZOPDAY_IMAGE_UPLOAD_MAX_GB", 20)
# The largest virtual size of an uploaded qcow2 image (GiB): a tiny file can claim petabytes.
ZOPDAY_IMAGE_MAX_VIRTUAL_GB = envint("ZOPDAY_IMAGE_MAX_VIRTUAL_GB", 2048)
# How much each project's uploaded image files may hold together (GiB).
ZOPDAY_PROJECT_IMAGE_QUOTA_GB = envint("ZOPDAY_PROJECT_IMAGE_QUOTA_GB", 50)
ZOPDAY_IMPORT_STALL_SECONDS = envint("ZOPDAY_IMPORT_STALL_SECONDS", 30)  # URL imports: no byte
# The longest a URL import may take, and the rate it must keep up over each window: a server
# that drips bytes cannot hold an import's thread for hours.
ZOPDAY_IMPORT_DEADLINE_SECONDS = envint("ZOPDAY_IMPORT_DEADLINE_SECONDS", 6 * 3600)
ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND = envint("ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND", 10 * 1024)
ZOPDAY_IMPORT_RATE_WINDOW_SECONDS = envint("ZOPDAY_IMPORT_RATE_WINDOW_SECONDS", 60)
# URL imports of one project downloading at once; the project's next ones wait, in order.
ZOPDAY_IMPORTS_PER_PROJECT = envint("ZOPDAY_IMPORTS_PER_PROJECT", 2)
# Networks the console never fetches from on a user's word (URL imports, registries, git
# sources, cloud endpoints): this machine's own, link-local metadata. The old name still works.
_BLOCKED = ["127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128", "169.254.0.0/16", "fe80::/10"]
ZOPDAY_EGRESS_BLOCKED_NETWORKS = envnetworks(
    "ZOPDAY_EGRESS_BLOCKED_NETWORKS", envlist("ZOPDAY_IMPORT_BLOCKED_NETWORKS", _BLOCKED)
)
ZOPDAY_CONTAINER_DISK_MAX_MB = envint("ZOPDAY_CONTAINER_DISK_MAX_MB", 20480)  # a pull's cap
# Machine run folders hold unix sockets, whose paths must stay under 108 bytes: keep this short.
ZOPDAY_MACHINES_DIR = Path(env("ZOPDAY_MACHINES_DIR", str(RUN_DIR / "machines"))).resolve()
ZOPDAY_EIP_POOL = env("ZOPDAY_EIP_POOL", "198.51.100.0/24")
# Where a cluster reaches this console (http(s)://host:port): its importer (CDI) fetches the
# images of KubeVirt instances' disks from signed links under this address.
ZOPDAY_PUBLIC_URL = env("ZOPDAY_PUBLIC_URL", "").rstrip("/")

# Console proxy: where browsers reach it.
CONSOLEPROXY_HOST = env("CONSOLEPROXY_HOST", "127.0.0.1")
CONSOLEPROXY_PORT = envint("CONSOLEPROXY_PORT", 8765)
# The websocket URL browsers open, without the path; empty: the page's own host name on
# CONSOLEPROXY_PORT (ws:// or wss:// like the page).
CONSOLEPROXY_URL = env("CONSOLEPROXY_URL", "")
# The web server's port (bin/zop run serves on it): the default origins allowed to open consoles.
ZOPDAY_PORT = envint("ZOPDAY_PORT", 8000)


def _default_console_origins() -> list[str]:
    """Pages of the console itself: every ALLOWED_HOSTS name on the web port, http and https,
    and https on its default port (behind a TLS reverse proxy). Wildcards are left out."""
    origins = []
    for host in ALLOWED_HOSTS:
        if host == "*" or host.startswith("."):
            continue
        origins += [f"http://{host}:{ZOPDAY_PORT}", f"https://{host}:{ZOPDAY_PORT}"]
        origins.append(f"https://{host}")
    return origins


# Origins (scheme://host[:port]) whose pages may open console websockets; others get 403.
CONSOLEPROXY_ALLOWED_ORIGINS = envlist("CONSOLEPROXY_ALLOWED_ORIGINS", _default_console_origins())
# How long a console ticket may wait (at most a minute), what recent serial/exec output a late
# viewer is shown first, and how often a session's byte counts are saved (a proxy may be killed).
CONSOLE_TICKET_SECONDS = min(envint("CONSOLE_TICKET_SECONDS", 30), 60)
CONSOLE_HISTORY_BYTES = envint("CONSOLE_HISTORY_BYTES", 64 * 1024)
CONSOLE_COUNT_SECONDS = max(envint("CONSOLE_COUNT_SECONDS", 5), 1)
# Recordings of serial and exec sessions are asciicast v2 files in RUN_DIR / "recordings".

SESSION_ENGINE = "instances.sessions"  # the database; a signed cookie while the disk is full
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"refusals": {"()": "zopday.logfilters.RefusalsWithoutTraceback"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["refusals"]}
    },
    "loggers": {
        # A refused request (403, a body too large) is one line, without the traceback it carries.
        **{name: {"filters": ["refusals"]} for name in ("django.request", "django.security")},
        # axes tells every successful login at INFO; failures and lockouts are warnings
        "axes": {"level": "WARNING"},
    },
    "root": {"handlers": ["console"], "level": env("ZOPDAY_LOG_LEVEL", "INFO")},
}


# ---- Provisioning (provisioning/): in a module of its own ------------------------------------
from zopday.settings_provisioning import *  # noqa: E402, F403
from zopday.settings_provisioning import ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS  # noqa: E402

CELERY_BEAT_SCHEDULE["resume-provisioning-jobs"] = {
    "task": "provisioning.resume_stalled",
    "schedule": float(envint("ZOPDAY_PROVISIONING_RESUME_SECONDS", 15)),
    "options": {"expires": 30},
}
CELERY_BEAT_SCHEDULE["refresh-provisioned-vms"] = {
    "task": "provisioning.refresh_vms",
    "schedule": float(ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS),
    "options": {"expires": ZOPDAY_PROVISIONING_VM_REFRESH_SECONDS},
}
CELERY_BEAT_SCHEDULE["apply-vm-schedules"] = {  # ZopNight schedules act at their edges
    "task": "provisioning.apply_schedules",
    "schedule": 60.0,
    "options": {"expires": 60},
}
