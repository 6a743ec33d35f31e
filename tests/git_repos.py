"""Real git repositories for the git source tests: a bare one (the remote), served over
file:// or by `git daemon` on loopback, and a work tree that commits and pushes to it."""

import socket
import subprocess
import time
from pathlib import Path

AUTHOR = {"user.name": "Ada Tester", "user.email": "ada@example.test"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


class GitRepo:
    """repo.commit({"manifests/web-1.yaml": text}, "Add web-1") → the pushed commit's sha; a
    None text removes the file."""

    def __init__(self, root: Path, branch: str = "main") -> None:
        self.root, self.branch = root, branch
        self.bare, self.work = root / "remote.git", root / "work"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "--quiet", "--bare", "-b", branch, str(self.bare))
        git(root, "init", "--quiet", "-b", branch, str(self.work))
        for key, value in AUTHOR.items():
            git(self.work, "config", key, value)
        git(self.work, "remote", "add", "origin", str(self.bare))

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def commit(self, files: dict[str, str | None], message: str) -> str:
        for name, text in files.items():
            path = self.work / name
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "--all")
        git(self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        git(self.work, "push", "--quiet", "origin", f"HEAD:{self.branch}")
        return git(self.work, "rev-parse", "HEAD")


class GitDaemon:
    """`git daemon` serving the folder's repositories read-only at git://127.0.0.1:<port>/."""

    def __init__(self, base: Path) -> None:
        self.base = base
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            ["git", "daemon", "--export-all", "--reuseaddr", f"--base-path={base}",
             "--listen=127.0.0.1", f"--port={self.port}", str(base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("git daemon did not listen in 10 s")

    def url(self, repo: GitRepo) -> str:
        return f"git://127.0.0.1:{self.port}/{repo.bare.relative_to(self.base)}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
