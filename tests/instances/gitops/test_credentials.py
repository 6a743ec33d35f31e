"""A token or deploy key reaches git and nothing else: stored encrypted, never in a page, a
sync's messages or the logs."""

import base64
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core.exceptions import ValidationError

from instances.choices import GitAuth, SyncStatus
from instances.gitops.services import CREDENTIAL_FOR_NEW_URL, SourceRequest, git_source_save
from instances.gitops.sync import git_source_sync
from instances.models import GitSource

pytestmark = pytest.mark.django_db

TOKEN = "ghp_s3cretTokenValue1234567890"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAsecretkeybody\n-----END OPENSSH PRIVATE KEY-----"


class Recorder(BaseHTTPRequestHandler):
    """A git server that knows no repository: it records each request's path and login."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_git():
    Recorder.seen = []
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/team/repo.git", Recorder.seen
    server.shutdown()


def shown_anywhere(text: str, *secrets: str) -> list[str]:
    forms = {
        *secrets,
        *(base64.b64encode(f"x-access-token:{s}".encode()).decode() for s in secrets),
    }
    return [form for form in forms if form in text]


def test_a_token_goes_to_the_server_in_a_header_and_nowhere_else(
    http_git, project, owner, viewer, client_for, caplog
):
    url, seen = http_git
    request = SourceRequest(url=url, branch="main", path="", auth=GitAuth.TOKEN, credential=TOKEN)
    caplog.set_level(logging.DEBUG)
    source = git_source_save(project=project, actor=owner, request=request)
    done = git_source_sync(source_id=source.pk, trigger="manual")
    assert done.status == SyncStatus.FAILED
    expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert seen and all(login == expected for _, login in seen)
    assert not any(TOKEN in path for path, _ in seen)
    stored = GitSource.objects.get()
    assert TOKEN not in stored.credential_encrypted and stored.credential == TOKEN
    said = " ".join([done.message, *done.problems, caplog.text])
    for role in ("owner", "viewer"):
        said += client_for(role).get("/projects/alpha/git/").content.decode()
    owner.is_staff = True
    owner.save()
    said += (
        client_for("owner").get(f"/admin/instances/gitsource/{source.pk}/change/").content.decode()
    )
    assert shown_anywhere(said, TOKEN) == []


def test_a_deploy_key_goes_to_ssh_in_a_private_file_that_is_then_removed(
    tmp_path, monkeypatch, project, owner
):
    bin_folder, record = tmp_path / "bin", tmp_path / "ssh-called"
    bin_folder.mkdir()
    ssh = bin_folder / "ssh"
    ssh.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {record}\n'
        'for arg; do [ -n "$next" ] && { stat -c %a "$arg"; cat "$arg"; } >> ' f"{record}; "
        '[ "$arg" = -i ] && next=1 || next=; done\n'
        'echo "git@example.test: Permission denied (publickey)." >&2\nexit 255\n'
    )  # fmt: skip
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_folder}:{os.environ['PATH']}")
    request = SourceRequest(
        url="ssh://git@example.test/team/repo.git", branch="main", path="",
        auth=GitAuth.SSH_KEY, credential=KEY,
    )  # fmt: skip
    source = git_source_save(project=project, actor=owner, request=request)
    done = git_source_sync(source_id=source.pk, trigger="manual")
    called = record.read_text()
    assert "IdentitiesOnly=yes" in called and "-i " in called
    assert "600\n" + KEY in called  # the key file: private to this user
    key_file = called.split("-i ")[1].split()[0]
    assert not os.path.exists(key_file)  # gone once git is done
    assert done.status == SyncStatus.FAILED and "Permission denied (publickey)" in done.message
    assert "secretkeybody" not in done.message + " ".join(done.problems)


def test_a_stored_token_goes_only_to_the_address_it_was_given_for(project, owner, client_for):
    first = "https://git.example.com/team/repo.git"
    request = SourceRequest(url=first, branch="main", path="", auth=GitAuth.TOKEN, credential=TOKEN)
    git_source_save(project=project, actor=owner, request=request)
    elsewhere = SourceRequest(
        url="https://attacker.example.net/x.git", branch="main", path="", auth=GitAuth.TOKEN
    )
    with pytest.raises(ValidationError) as refused:
        git_source_save(project=project, actor=owner, request=elsewhere)
    assert refused.value.message_dict["credential"] == [CREDENTIAL_FOR_NEW_URL]
    assert GitSource.objects.get().url == first  # nothing changed
    page = client_for("owner").post(
        f"/projects/{project.slug}/git/",
        {"url": "https://attacker.example.net/x.git", "branch": "main", "path": "",
         "auth": GitAuth.TOKEN, "credential": ""},
    )  # fmt: skip
    assert page.status_code == 200 and "give its deploy key or token again" in page.text
    same = SourceRequest(url=first, branch="dev", path="", auth=GitAuth.TOKEN)
    assert git_source_save(project=project, actor=owner, request=same).credential == TOKEN
