"""The owner's form for a project's git source; the credential is write-only."""

from typing import Any

from django import forms

from instances.choices import GitAuth
from instances.gitops import git
from instances.gitops.services import CREDENTIAL_FOR_NEW_URL, SourceRequest
from instances.models import GitSource


class GitSourceForm(forms.Form):
    url = forms.CharField(label="Repository URL", max_length=500)
    branch = forms.CharField(max_length=200, initial="main")
    path = forms.CharField(
        max_length=300, required=False, help_text="The folder of the manifests; empty for the root."
    )
    auth = forms.ChoiceField(label="Log in with", choices=GitAuth.choices, initial=GitAuth.NONE)
    credential = forms.CharField(
        label="Deploy key or token",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="A private SSH key (deploy key) or an HTTPS access token. It is encrypted and "
        "never shown; leave empty to keep the stored one.",
    )

    def __init__(self, *args: Any, source: GitSource | None = None, **kwargs: Any) -> None:
        if source is not None:
            kwargs.setdefault(
                "initial",
                {
                    "url": source.url,
                    "branch": source.branch,
                    "path": source.path,
                    "auth": source.auth,
                },
            )
        super().__init__(*args, **kwargs)
        self.source = source

    def clean_branch(self) -> str:
        branch = self.cleaned_data["branch"].strip()
        problem = git.branch_problem(branch)
        if problem:
            raise forms.ValidationError(problem)
        return branch

    def clean_path(self) -> str:
        path = self.cleaned_data["path"].strip().strip("/")
        if ".." in path.split("/") or path.startswith("-"):
            raise forms.ValidationError("Give a folder inside the repository.")
        return path

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        auth, url = cleaned.get("auth"), cleaned.get("url", "").strip()
        if url and auth:
            problem = git.url_problem(url, auth)
            if problem:
                self.add_error("url", problem)
        stored = self.source is not None and self.source.auth == auth and self.source.credential
        if auth != GitAuth.NONE and not cleaned.get("credential", "").strip():
            if not stored:
                self.add_error("credential", "Give the deploy key or the token.")
            elif self.source is not None and url and url != self.source.url:
                self.add_error("credential", CREDENTIAL_FOR_NEW_URL)
        credential = cleaned.get("credential", "").strip()
        if auth == GitAuth.SSH_KEY and credential and "PRIVATE KEY" not in credential:
            self.add_error("credential", "Give the private key, -----BEGIN … PRIVATE KEY-----.")
        return cleaned

    def source_request(self) -> SourceRequest:
        data = self.cleaned_data
        return SourceRequest(
            url=data["url"].strip(),
            branch=data["branch"],
            path=data["path"],
            auth=data["auth"],
            credential=data["credential"].strip(),
        )
