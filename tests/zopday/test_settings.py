import os
import subprocess
import sys

from tests.services import ROOT


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    unset = {"DATABASE_URL", "SECRET_KEY", "ZOPDAY_SECRETS_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


PRODUCTION_KEY = "k" * 20 + "-production-secret-key-with-enough-entropy-0123456789"
SECRETS_KEY = "hQ2wGpLZ1cYd8tVq0sBn3mXe7uKa5rJf9iOw4yTz6lE="  # a Fernet key (32 bytes, base64)


def test_check_deploy_is_clean_in_production_mode(tmp_path):
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING",
        ZOPDAY_ENV="production", ZOPDAY_RUN_DIR=str(tmp_path), SECRET_KEY=PRODUCTION_KEY,
        ALLOWED_HOSTS="console.example.com", DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        ZOPDAY_SECRETS_KEY=SECRETS_KEY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNINGS" not in result.stderr


def test_check_deploy_warns_when_the_secrets_key_is_not_given_in_production(tmp_path):
    result = run_manage(
        "check", "--deploy",
        ZOPDAY_ENV="production", ZOPDAY_RUN_DIR=str(tmp_path), SECRET_KEY=PRODUCTION_KEY,
        ALLOWED_HOSTS="console.example.com", DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
    )  # fmt: skip
    assert "(provisioning.W001) ZOPDAY_SECRETS_KEY is not set" in result.stderr
    assert "System check identified 1 issue" in result.stdout + result.stderr


def test_production_mode_refuses_to_start_without_a_secret_key(tmp_path):
    result = run_manage("check", ZOPDAY_ENV="production", ZOPDAY_RUN_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_the_development_secret_key_is_generated_once_into_the_run_folder(tmp_path):
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = run_manage("shell", "--no-imports", "-c", code, ZOPDAY_RUN_DIR=str(tmp_path))
    second = run_manage("shell", "--no-imports", "-c", code, ZOPDAY_RUN_DIR=str(tmp_path))
    assert first.stdout == second.stdout == (tmp_path / "secret_key").read_text() + "\n"
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"


def test_sqlite_runs_in_wal_mode_by_default(tmp_path):
    code = (
        "from django.db import connection; c = connection.cursor(); "
        "c.execute('PRAGMA journal_mode'); print(c.fetchone()[0])"
    )
    result = run_manage("shell", "--no-imports", "-c", code, ZOPDAY_RUN_DIR=str(tmp_path))
    assert result.stdout.strip() == "wal", result.stderr


def test_default_dns_resolvers_that_are_not_addresses_are_refused_at_start(tmp_path):
    result = run_manage(
        "check", ZOPDAY_RUN_DIR=str(tmp_path), ZOPDAY_DNS_RESOLVERS="1.1.1.1,dns.example"
    )
    assert result.returncode != 0
    assert "ZOPDAY_DNS_RESOLVERS: 'dns.example' is not an IP address" in result.stderr
