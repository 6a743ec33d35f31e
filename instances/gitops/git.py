"""Reading one branch of a repository with git itself, into a bare cache folder per source under
the run folder. Credentials reach git through its environment (an SSH key file, an HTTP header
in GIT_CONFIG_*), never its command line, a URL or a message: `GitError` texts are redacted.
The remote's host is checked by the egress policy and git pinned to the address checked."""

import base64
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from instances import egress
from instances.choices import GitAuth

REF = "refs/zopday/head"  # where the cache keeps the branch's last fetched commit
MANIFEST_SUFFIXES = (".yaml", ".yml")
MANIFEST_FILES_MAX = 500
MANIFEST_BYTES_MAX = 5 * 1024 * 1024  # all of a commit's manifests together
SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")  # git@github.com:owner/repo.git


class GitError(Exception):
    """git could not do it; the message is git's own, without any credential."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class Remote:
    url: str
    auth: str
    credential: str


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    author: str


def url_scheme(url: str) -> str:
    """git's protocol name for a URL: ssh for git@host:path, else the URL's scheme."""
    if SCP_LIKE.match(url):
        return "ssh"
    return urlsplit(url).scheme.lower()


def remote_host(url: str) -> tuple[str, int] | None:
    """The host and port git connects to (None for a local path); ValueError with a message
    for a malformed URL."""
    if SCP_LIKE.match(url):
        return url.split("@", 1)[1].split(":", 1)[0].lower(), 22
    parts = egress.split_url(url)
    return (parts.host, parts.port) if parts.host else None


def url_problem(url: str, auth: str) -> str:
    """Why the console will not fetch from this URL ("" when it will)."""
    try:
        where = remote_host(url)
    except ValueError as error:
        return str(error)
    if where is not None and (refused := egress.literal_refusal(where[0])):
        return refused
    scheme = url_scheme(url)
    allowed = list(settings.ZOPDAY_GITOPS_URL_SCHEMES)
    if url.startswith("-") or scheme not in allowed:
        return f"Give a repository URL starting with {' or '.join(f'{s}://' for s in allowed)}."
    if scheme != "ssh" and urlsplit(url).password:
        return "Leave the token out of the URL: give it in the token field, which is encrypted."
    if auth == GitAuth.SSH_KEY and scheme != "ssh":
        return "A deploy key logs in over SSH: give an ssh:// or git@host:path URL."
    if auth == GitAuth.TOKEN and scheme not in ("https", "http"):
        return "An access token logs in over HTTPS: give an https:// URL."
    return ""


def branch_problem(branch: str) -> str:
    checked = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{branch}"], capture_output=True, check=False
    )
    return "" if checked.returncode == 0 and branch else "This is not a branch name git accepts."


def _redacted(text: str, remote: Remote | None) -> str:
    if remote is not None and remote.credential:
        secret = remote.credential
        for form in (secret, secret.strip(), _basic(secret)):
            if form:
                text = text.replace(form, "[hidden]")
    return text


def _basic(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass(frozen=True)
class _Pin:
    """git's settings that keep it on the checked address: no redirect, no second DNS answer
    (curl's resolve list for HTTP, ssh's HostName; the git protocol is checked only)."""

    config: list[tuple[str, str]]
    ssh: str = ""


def _pin(url: str) -> _Pin:
    try:
        where = remote_host(url)
    except ValueError as error:
        raise GitError(str(error), retryable=False) from None
    if where is None:
        return _Pin([])
    host, port = where
    try:
        addresses = egress.checked_addresses(host, port)
    except egress.EgressRefused as refused:
        raise GitError(refused.message, retryable=False) from None
    config = [("http.followRedirects", "false")]
    if not addresses or egress.literal(host) is not None:
        return _Pin(config)  # an unknown host (git says so), or an address already
    address = addresses[0]
    shown = f"[{address}]" if ":" in address else address
    alias = host if port == 22 else f"[{host}]:{port}"  # the name known_hosts keeps
    ssh = f" -o HostName={shlex.quote(address)} -o HostKeyAlias={shlex.quote(alias)}"
    return _Pin([*config, ("http.curloptResolve", f"{host}:{port}:{shown}")], ssh)


@contextmanager
def _environment(cache: Path, remote: Remote | None) -> Iterator[dict[str, str]]:
    """git's environment: no prompts, no user or system configuration, only the allowed
    protocols, the remote pinned to its checked address, and the source's credential (a key
    file that lives only while git runs)."""
    pin = _pin(remote.url) if remote is not None else _Pin([])
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cache),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "true",
        "GIT_ALLOW_PROTOCOL": ":".join(settings.ZOPDAY_GITOPS_URL_SCHEMES),
        "LC_ALL": "C",
    }
    with tempfile.TemporaryDirectory(prefix="key", dir=cache.parent) as private:
        known_hosts = shlex.quote(str(cache / "known_hosts"))
        ssh = (
            "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new "
            f"-o UserKnownHostsFile={known_hosts}"
        )
        if remote is not None and remote.auth == GitAuth.SSH_KEY and remote.credential:
            key = Path(private) / "key"
            key.touch(mode=0o600)
            key.write_text(remote.credential.strip() + "\n")
            ssh += f" -o IdentitiesOnly=yes -i {shlex.quote(str(key))}"
        env["GIT_SSH_COMMAND"] = ssh + pin.ssh
        config = list(pin.config)
        if remote is not None and remote.auth == GitAuth.TOKEN and remote.credential:
            config.append(("http.extraHeader", f"Authorization: Basic {_basic(remote.credential)}"))
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for index, (key_name, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{index}"] = key_name
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        yield env


def _git(cache: Path, *args: str, remote: Remote | None = None) -> bytes:
    with _environment(cache, remote) as env:
        try:
            done = subprocess.run(
                ["git", "-C", str(cache), *args],
                capture_output=True,
                env=env,
                timeout=settings.ZOPDAY_GITOPS_GIT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitError(
                f"git {args[0]} took over {settings.ZOPDAY_GITOPS_GIT_SECONDS} s."
            ) from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        lines = [line.removeprefix("fatal: ") for line in said if line.strip()][-5:]
        raise GitError(_redacted(" ".join(lines) or f"git {args[0]} failed.", remote))
    return done.stdout


def fetch(*, cache: Path, remote: Remote, branch: str) -> Commit:
    """Fetch the branch into the cache (made on first use) and describe its head commit."""
    if not (cache / "HEAD").exists():
        cache.mkdir(parents=True, exist_ok=True)
        _git(cache, "init", "--bare", "--quiet")
    spec = f"+refs/heads/{branch}:{REF}"
    _git(cache, "fetch", "--quiet", "--no-tags", "--", remote.url, spec, remote=remote)
    sha = _git(cache, "rev-parse", "--verify", f"{REF}^{{commit}}").decode().strip()
    return describe(cache=cache, sha=sha)


def describe(*, cache: Path, sha: str) -> Commit:
    shown = _git(cache, "log", "-1", "--format=%H%x00%s%x00%an <%ae>", sha).decode(errors="replace")
    full, subject, author = shown.rstrip("\n").split("\0")
    return Commit(full, subject[:300], author[:300])


def _folder(path: str) -> str:
    return path.strip().strip("/")


def manifests(*, cache: Path, sha: str, path: str) -> list[tuple[str, str]]:
    """(file name, text) of every *.yaml and *.yml file under `path` in the commit, in name
    order. Raises GitError (not retryable) for a path the commit lacks or files too large."""
    folder = _folder(path)
    listed = _git(
        cache, "ls-tree", "-r", "-z", "--name-only", sha, "--", *([folder] if folder else [])
    )
    names = sorted(
        name
        for name in listed.decode(errors="replace").split("\0")
        if name.endswith(MANIFEST_SUFFIXES) and (not folder or name.startswith(f"{folder}/"))
    )
    if not names:
        where = f"under {folder}/" if folder else "in the repository"
        raise GitError(f"No *.yaml or *.yml file {where} at {sha[:10]}.", retryable=False)
    if len(names) > MANIFEST_FILES_MAX:
        raise GitError(f"Over {MANIFEST_FILES_MAX} manifest files at {sha[:10]}.", retryable=False)
    sources, total = [], 0
    for name in names:
        blob = _git(cache, "cat-file", "blob", f"{sha}:{name}")
        total += len(blob)
        if total > MANIFEST_BYTES_MAX:
            raise GitError("The manifests pass 5 MB together.", retryable=False)
        try:
            sources.append((name, blob.decode()))
        except UnicodeDecodeError:
            raise GitError(f"{name} is not UTF-8 text.", retryable=False) from None
    return sources


def files_changed(*, cache: Path, old: str, new: str, path: str) -> list[str] | None:
    """`git diff --name-status` lines (M<TAB>file) of the manifests folder between two commits;
    None when the old commit is not in the cache."""
    try:
        _git(cache, "cat-file", "-e", f"{old}^{{commit}}")
    except GitError:
        return None
    folder = _folder(path)
    shown = _git(
        cache,
        "diff",
        "--no-renames",
        "--name-status",
        old,
        new,
        "--",
        *([folder] if folder else []),
    )
    return [line for line in shown.decode(errors="replace").splitlines() if line]
