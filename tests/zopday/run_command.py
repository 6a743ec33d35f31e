"""`bin/zop run` as a user starts it, for the tests of the run command: free ports, its output
read as it comes, and Ctrl-C sent the way a terminal sends it (to the whole process group)."""

import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

# What the test runner's own environment points at; the run command must find its own.
NOT_INHERITED = {
    "DATABASE_URL", "REDIS_URL", "ZOPDAY_RUN_DIR", "ZOPDAY_IMAGES_DIR", "ZOPDAY_MACHINES_DIR",
    "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONPATH",
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(path.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def is_alive(pid: int) -> bool:
    """Running or sleeping; a zombie is already dead and only waits for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def not_private(root: Path) -> list[str]:
    """Files and folders under root that the group or others may read, write or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found


def supervisor_config(root: Path, run_dir: Path, host: str, port: int) -> str:
    """What bin/zop run writes to supervisord.conf, from bin/zop's own supervisor_config."""
    script = 'source "$1/bin/zop" && supervisor_config "$2" "$3" test-host'
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env |= {"ZOPDAY_RUN_DIR": str(run_dir)}
    return subprocess.run(
        ["bash", "-c", script, "zop", str(root), host, str(port)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def program_commands(config: str) -> dict[str, list[str]]:
    """Each [program:NAME]'s command in a supervisord configuration, as argv."""
    commands, name = {}, None
    for line in config.splitlines():
        if section := re.fullmatch(r"\[(\w+):(\S+)\]", line):
            name = section[2] if section[1] == "program" else None
        elif name and line.startswith("command="):
            commands[name] = shlex.split(line.removeprefix("command=").replace("%%", "%"))
    return commands


class ZopRun:
    """One `bin/zop run` of the checkout at root (or another command run as it is), its output
    collected by a thread."""

    def __init__(
        self, root: Path, run_dir: Path, command: list[str] | None = None, **env: str
    ) -> None:
        self.run_dir = run_dir
        self.port = free_port()
        self.proxy_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        environment = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        environment |= {
            "ZOPDAY_RUN_DIR": str(run_dir),
            "ZOPDAY_PORT": str(self.port),
            "CONSOLEPROXY_PORT": str(self.proxy_port),
            "ZOPDAY_MOTO_PORT": str(free_port()),
            "ZOPDAY_NETWORK_MODE": "user",  # leave the host's shared bridge namespace alone
            "NO_COLOR": "1",
            **env,
        }
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            command or [str(root / "bin" / "zop"), "run"], cwd=root, env=environment, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 240) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := re.search(pattern, line):
                    return match
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} in:\n{self.output[-6000:]}")

    def wait_for_page(self, path: str = "login/", timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while http_status(self.url + path) != 200:
            assert self.process.poll() is None, f"bin/zop run exited:\n{self.output[-6000:]}"
            assert time.monotonic() < deadline, f"no 200 on {path}:\n{self.output[-6000:]}"
            time.sleep(0.2)

    def supervisorctl(self, *args: str, venv: Path) -> str:
        conf = self.run_dir / "supervisord.conf"
        command = [str(venv / "bin" / "supervisorctl"), "-c", str(conf), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout

    def ctrl_c(self, timeout: float = 90) -> int:
        """SIGINT to the process group, as a terminal's Ctrl-C; the exit status."""
        os.killpg(self.process.pid, signal.SIGINT)
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            for pid in descendants(self.process.pid):
                os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait()


def wait_all_gone(pids: set[int], timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if is_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive
