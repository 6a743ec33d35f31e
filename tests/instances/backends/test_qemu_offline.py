"""Parts of the QEMU backend that need no QEMU: seed ISO, state files, agent protocol, names."""

import contextlib
import dataclasses
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pycdlib
import pytest

from instances.backends.base import (
    BackendError,
    CloudInitSeed,
    DiskSpec,
    ExitKind,
    FirmwareSpec,
    MachineSpec,
    Power,
)
from instances.backends.qemu import QemuBackend, process
from instances.backends.qemu import agent as agent_module
from instances.backends.qemu import qmp as qmp_module
from instances.backends.qemu.agent import GuestAgent
from instances.backends.qemu.firmware import firmware_for, prepare_vars
from instances.backends.qemu.network import bridge_name, tap_name
from instances.backends.qemu.qmp import Monitor
from instances.backends.qemu.run_folder import RunFolder, Runtime
from instances.backends.qemu.seed import write_seed_iso


def spec_of(disk_name: str) -> DiskSpec:
    """A one-GB secondary virtio disk's spec: what a snapshot names a disk by."""
    return DiskSpec(disk_name, "secondary", "virtio", size_gb=1)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="zq"))
    yield path
    for child in sorted(path.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


def test_the_seed_iso_is_labelled_cidata_and_keeps_the_nocloud_file_names(short_dir):
    seed = CloudInitSeed(
        meta_data="instance-id: i-1\n", user_data="#cloud-config\n", network_config="version: 2\n"
    )
    write_seed_iso(seed, short_dir / "seed.iso")
    assert read_iso(short_dir / "seed.iso") == {
        "label": "cidata",
        "meta-data": "instance-id: i-1\n",
        "user-data": "#cloud-config\n",
        "network-config": "version: 2\n",
    }


def read_iso(path: Path) -> dict[str, str]:
    """The volume label and the files found under their Rock Ridge and their Joliet names."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        found = {"label": iso.pvd.volume_identifier.decode().strip()}
        for name in ("meta-data", "user-data", "network-config"):
            contents = set()
            for kind in ("rr_path", "joliet_path"):
                data = io.BytesIO()
                try:
                    iso.get_file_from_iso_fp(data, **{kind: f"/{name}"})
                except pycdlib.pycdlibexception.PyCdlibInvalidInput:
                    contents.add(f"missing as {kind}")
                else:
                    contents.add(data.getvalue().decode())
            if contents != {f"missing as {kind}" for kind in ("rr_path", "joliet_path")}:
                found[name] = contents.pop() if len(contents) == 1 else repr(sorted(contents))
        return found
    finally:
        iso.close()


def test_a_seed_without_network_config_has_only_two_files(short_dir):
    write_seed_iso(CloudInitSeed(meta_data="a: 1\n", user_data=""), short_dir / "seed.iso")
    assert read_iso(short_dir / "seed.iso") == {
        "label": "cidata",
        "meta-data": "a: 1\n",
        "user-data": "",
    }


def backend_with_a_past_run(root: Path, *, pid: int, stop_requested: bool) -> QemuBackend:
    backend = QemuBackend(root, network_mode="user")
    run = backend._run_folder("i-1")
    run.create()
    run.begin_start(pid, Runtime())
    if stop_requested:
        run.mark_stop_requested()
    return backend


def test_a_machine_that_never_started_reads_stopped_without_an_exit_kind(short_dir):
    status = QemuBackend(short_dir, network_mode="user").status("i-1")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.NONE)


def test_a_launched_machine_whose_process_vanished_reads_crashed(short_dir):
    # our own pid is alive but is not a QEMU of this run folder: it must not count
    backend = backend_with_a_past_run(short_dir, pid=os.getpid(), stop_requested=False)
    assert backend.status("i-1").exit is ExitKind.CRASHED
    assert backend.running_machines() == []


def test_a_vanished_process_after_a_stop_request_reads_requested_and_stays_so(short_dir):
    backend = backend_with_a_past_run(short_dir, pid=os.getpid(), stop_requested=True)
    assert backend.status("i-1").exit is ExitKind.REQUESTED
    backend._run_folder("i-1").clear_stop_requested()
    assert backend.status("i-1").exit is ExitKind.REQUESTED  # recorded in the run folder


def test_undefine_removes_the_run_folder(short_dir):
    backend = backend_with_a_past_run(short_dir, pid=os.getpid(), stop_requested=True)
    backend.undefine("i-1")
    assert not (short_dir / "i-1").exists()


def test_machine_ids_that_are_not_file_names_are_refused(short_dir):
    backend = QemuBackend(short_dir, network_mode="user")
    with pytest.raises(BackendError, match="not a valid machine id"):
        backend.status("../etc")


def test_a_run_folder_too_deep_for_unix_sockets_is_refused(short_dir):
    backend = QemuBackend(short_dir / ("x" * 100), network_mode="user")
    with pytest.raises(BackendError, match="too long for unix sockets"):
        backend.status("i-1")


def test_console_kinds_map_to_the_sockets_in_the_run_folder(short_dir):
    backend = QemuBackend(short_dir, network_mode="user")
    assert backend.console_socket("i-1", "serial") == short_dir / "i-1" / "serial.sock"
    assert backend.console_socket("i-1", "vnc").name == "vnc.sock"
    assert backend.console_socket("i-1", "exec").name == "exec.sock"
    with pytest.raises(BackendError, match="Unknown console kind"):
        backend.console_socket("i-1", "rdp")


def test_user_mode_networking_is_stated_when_asked_for(short_dir):
    assert QemuBackend(short_dir, network_mode="user").network_mode == "user"


def test_tap_and_bridge_names_fit_the_kernel_limit_and_are_stable():
    assert len(tap_name("i-" + "9" * 60, "eth12")) <= 15
    assert len(bridge_name("subnet-" + "x" * 80)) <= 15
    assert tap_name("i-1", "eth0") == tap_name("i-1", "eth0") != tap_name("i-1", "eth1")


Reply = bytes | Iterable[bytes] | None


def fake_agent(path: Path, answer: Callable[[dict], Reply]) -> threading.Thread:
    """A qemu-ga stand-in on a unix socket: one connection, replies chosen by answer() (bytes,
    or chunks sent one after another)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        connection, _ = server.accept()
        with connection, server, contextlib.suppress(ConnectionError):  # the client gave up
            buffer = b""
            while chunk := connection.recv(4096):
                buffer += chunk.replace(b"\xff", b"")
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    reply = answer(json.loads(line))
                    for part in [reply] if isinstance(reply, bytes) else reply or ():
                        connection.sendall(part)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_the_agent_client_drops_stale_replies_before_its_sync(short_dir):
    def answer(message: dict) -> bytes | None:
        if message["execute"] == "guest-sync-delimited":
            token = message["arguments"]["id"]
            stale = b'{"return": {"pid": 7}}\n\xff{"return": 12}\n'  # an older client's leftovers
            return stale + b"\xff" + json.dumps({"return": token}).encode() + b"\n"
        return b'{"return": {"host-name": "web-1"}}\n'

    fake_agent(short_dir / "qga.sock", answer)
    agent = GuestAgent(short_dir / "qga.sock", timeout=2)
    assert agent.call("guest-get-host-name") == {"host-name": "web-1"}


def reboot_answer(
    refusal: bytes | None, asked: list[dict] | None = None
) -> Callable[[dict], Reply]:
    def answer(message: dict) -> bytes | None:
        if message["execute"] == "guest-sync-delimited":
            return b"\xff" + json.dumps({"return": message["arguments"]["id"]}).encode() + b"\n"
        if asked is not None:
            asked.append(message)
        return refusal

    return answer


def test_a_reboot_the_agent_takes_in_silence_is_under_way(short_dir):
    asked: list[dict] = []
    fake_agent(short_dir / "qga.sock", reboot_answer(None, asked))  # qemu-ga answers no success
    started = time.monotonic()
    GuestAgent(short_dir / "qga.sock", timeout=2).reboot(refusal_wait=0.1)
    assert time.monotonic() - started < 1  # the refusal wait, not the agent's timeout
    assert asked == [{"execute": "guest-shutdown", "arguments": {"mode": "reboot"}}]


def test_a_reboot_the_agent_refuses_is_an_error(short_dir):
    refusal = b'{"error": {"class": "GenericError", "desc": "Command guest-shutdown has been disabled"}}\n'
    fake_agent(short_dir / "qga.sock", reboot_answer(refusal))
    with pytest.raises(BackendError, match="refused guest-shutdown: Command guest-shutdown has"):
        GuestAgent(short_dir / "qga.sock", timeout=2).reboot(refusal_wait=2)


def test_an_agent_that_does_not_answer_is_a_retryable_error(short_dir):
    fake_agent(short_dir / "qga.sock", lambda message: None)
    with pytest.raises(BackendError, match="did not answer") as caught:
        GuestAgent(short_dir / "qga.sock", timeout=0.3).ping()
    assert caught.value.retryable


def synced(then: Callable[[dict], Reply]) -> Callable[[dict], Reply]:
    def answer(message: dict) -> Reply:
        if message["execute"] == "guest-sync-delimited":
            return b"\xff" + json.dumps({"return": message["arguments"]["id"]}).encode() + b"\n"
        return then(message)

    return answer


def test_an_agent_that_never_ends_its_reply_is_cut_off_at_the_timeout(short_dir):
    def babble(message: dict) -> Iterator[bytes]:
        for _ in range(100):  # 5 s of bytes without a newline, a little at a time
            yield b"x" * 100
            time.sleep(0.05)

    fake_agent(short_dir / "qga.sock", synced(babble))
    asked = time.monotonic()
    with pytest.raises(BackendError, match="did not answer guest-ping within 0.5 s"):
        GuestAgent(short_dir / "qga.sock", timeout=0.5).ping()
    assert time.monotonic() - asked < 2


def test_an_agent_reply_beyond_the_size_limit_is_refused(short_dir, monkeypatch):
    monkeypatch.setattr(agent_module, "MAX_REPLY", 100_000)
    fake_agent(short_dir / "qga.sock", synced(lambda message: b"x" * 200_000))
    with pytest.raises(BackendError, match="reply to guest-ping is too large"):
        GuestAgent(short_dir / "qga.sock", timeout=2).ping()


@pytest.mark.parametrize("reply", [b"[1, 2]\n", b"{oops\n", b'{"return": "many"}\n'])
def test_an_agent_reply_of_the_wrong_shape_is_an_error_not_a_crash(short_dir, reply):
    fake_agent(short_dir / "qga.sock", synced(lambda message: reply))
    with pytest.raises(BackendError, match="unreadable reply"):
        GuestAgent(short_dir / "qga.sock", timeout=2).freeze()


def test_a_missing_agent_socket_is_a_retryable_error(short_dir):
    with pytest.raises(BackendError, match="not available") as caught:
        GuestAgent(short_dir / "nothing.sock").ping()
    assert caught.value.retryable


@pytest.fixture
def ovmf(short_dir: Path) -> Path:
    """Stand-ins for the OVMF files: each vars template holds its own name."""
    folder = short_dir / "ovmf"
    folder.mkdir()
    for name in (
        "OVMF_CODE_4M.fd",
        "OVMF_CODE_4M.secboot.fd",
        "OVMF_VARS_4M.fd",
        "OVMF_VARS_4M.ms.fd",
    ):
        (folder / name).write_text(name)
    return folder


def test_persistent_efi_vars_survive_a_start_and_other_vars_are_fresh_each_time(short_dir, ovmf):
    run = RunFolder(short_dir / "i-1")
    run.create()
    firmware = firmware_for(FirmwareSpec(bootloader="uefi"), ovmf)
    assert firmware is not None
    prepare_vars(run, firmware, persistent=True)
    run.efi_vars.write_text("boot entries written by the guest")
    prepare_vars(run, firmware, persistent=True)
    assert run.efi_vars.read_text() == "boot entries written by the guest"
    prepare_vars(run, firmware, persistent=False)
    assert run.efi_vars.read_text() == "OVMF_VARS_4M.fd"


def test_switching_secure_boot_on_replaces_even_persistent_vars(short_dir, ovmf):
    run = RunFolder(short_dir / "i-1")
    run.create()
    plain = firmware_for(FirmwareSpec(bootloader="uefi"), ovmf)
    secure = firmware_for(FirmwareSpec(bootloader="uefi", secure_boot=True), ovmf)
    assert plain is not None and secure is not None
    prepare_vars(run, plain, persistent=True)
    prepare_vars(run, secure, persistent=True)
    assert run.efi_vars.read_text() == "OVMF_VARS_4M.ms.fd"


def test_missing_ovmf_files_are_named_in_the_error(short_dir):
    with pytest.raises(BackendError, match="apt-get install ovmf"):
        firmware_for(FirmwareSpec(bootloader="uefi"), short_dir)


# A stand-in for QEMU's monitor, run as its own process: its command line names the QMP socket,
# as QEMU's does, so the backend takes it for the machine's QEMU. It answers query-status with the
# state it was given and exits on quit. Given "event-first", its first client gets an event before
# the answer to qmp_capabilities, as QEMU's may when the guest resets just then.
FAKE_QEMU = """
import json, os, socket, sys
path, state = sys.argv[1], sys.argv[2]
event_first = sys.argv[3:] == ["event-first"]
event = {"event": "RESET", "data": {"guest": True, "reason": "guest-reset"},
         "timestamp": {"seconds": 1, "microseconds": 0}}
server = socket.socket(socket.AF_UNIX)
server.bind(path + ".new")  # the socket appears under its name only once it listens
server.listen(1)
os.rename(path + ".new", path)
greeting = {"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}, "package": ""},
                    "capabilities": []}}
decoder = json.JSONDecoder()
while True:
    connection, _ = server.accept()
    try:
        connection.sendall(json.dumps(greeting).encode() + b"\\r\\n")
        buffer = ""
        while chunk := connection.recv(4096):
            buffer = (buffer + chunk.decode()).lstrip()
            while buffer:  # QMP commands are a JSON stream, not lines
                try:
                    message, end = decoder.raw_decode(buffer)
                except ValueError:
                    break
                buffer = buffer[end:].lstrip()
                reply = {"return": {}}
                if message["execute"] == "query-status":
                    reply["return"] = {"status": state, "running": state == "running",
                                       "singlestep": False}
                if "id" in message:
                    reply["id"] = message["id"]
                if message["execute"] == "qmp_capabilities" and event_first:
                    connection.sendall(json.dumps(event).encode() + b"\\r\\n")
                    event_first = False
                connection.sendall(json.dumps(reply).encode() + b"\\r\\n")
                if message["execute"] == "quit":
                    sys.exit(0)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away mid-answer, as a backend may: serve the next one
    connection.close()
"""


@pytest.fixture
def fake_qemu(short_dir: Path) -> Iterator[Callable[..., QemuBackend]]:
    """fake_qemu(state) -> a backend whose machine i-1 runs a fake QEMU in that state."""
    started: list[subprocess.Popen] = []

    def start(state: str, *options: str) -> QemuBackend:
        backend = QemuBackend(short_dir, network_mode="user")
        run = backend._run_folder("i-1")
        run.create()
        argv = [sys.executable, "-c", FAKE_QEMU, str(run.qmp_socket), state, *options]
        fake = subprocess.Popen(argv)
        started.append(fake)
        deadline = time.monotonic() + 10
        while not run.qmp_socket.exists():
            assert time.monotonic() < deadline, "the fake QEMU never listened"
            time.sleep(0.02)
        run.begin_start(fake.pid, Runtime(links={"eth0": True, "eth1": False}))
        return backend

    yield start
    for fake in started:
        fake.kill()
        fake.wait()


def test_a_running_guest_reads_running_with_its_pid_links_and_boots(fake_qemu):
    backend = fake_qemu("running")
    banner = "[    0.000000] Linux version 6.1.0 (debian-kernel@lists.debian.org)\n"
    backend.serial_log("i-1").write_text(
        banner + "cat /proc/version\nLinux version 6.1.0\n" + banner
    )
    status = backend.status("i-1")
    assert (status.power, status.exit) == (Power.RUNNING, ExitKind.NONE)
    assert status.links == {"eth0": True, "eth1": False}
    assert status.boots == 1  # two kernel banners: one reset; the `cat` output does not count
    assert backend.running_machines() == ["i-1"]
    # later reads scan only what was written since, and count a banner once its line is whole
    with backend.serial_log("i-1").open("a") as log:
        log.write(banner[:20])
    assert backend.status("i-1").boots == 1
    with backend.serial_log("i-1").open("a") as log:
        log.write(banner[20:] + "root@i-1:/# ")
    assert backend.status("i-1").boots == 2
    assert backend.status("i-1").boots == 2


def test_a_guest_that_powered_itself_off_reads_guest_poweroff_and_its_qemu_is_ended(fake_qemu):
    backend = fake_qemu("shutdown")
    status = backend.status("i-1")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.GUEST_POWEROFF)
    assert backend.running_machines() == []
    assert backend.status("i-1").exit is ExitKind.GUEST_POWEROFF


def test_waiting_for_a_running_guest_to_power_off_times_out(fake_qemu):
    assert not fake_qemu("running").wait_powered_off("i-1", 0.1)


def test_waiting_without_a_watch_monitor_reads_the_status_instead(fake_qemu):
    assert fake_qemu("shutdown").wait_powered_off("i-1", 5)


def test_a_status_wait_answers_from_the_monitor_and_hands_its_errors_to_the_caller(fake_qemu):
    off = Monitor(fake_qemu("shutdown")._run_folder("i-1").qmp_socket)
    assert off.wait_for_status({"shutdown"}, {"SHUTDOWN"}, 5)
    assert not off.wait_for_status({"guest-panicked"}, {"GUEST_PANICKED"}, 0.1)  # no event came
    gone = Monitor(off.socket_path.with_name("nothing.sock"), timeout=0.5)
    with pytest.raises(BackendError, match="monitor socket is not available") as raised:
        gone.wait_for_status({"shutdown"}, {"SHUTDOWN"}, 5)
    assert raised.value.retryable


def test_a_status_wait_answers_before_it_closes_its_session(fake_qemu, monkeypatch):
    """The caller records the power-off first; closing the monitor's session waits for it."""
    monkeypatch.setattr(qmp_module, "HAND_OVER_SECONDS", 2.0)
    off = Monitor(fake_qemu("shutdown")._run_folder("i-1").qmp_socket)
    asked = time.monotonic()
    assert off.wait_for_status({"shutdown"}, {"SHUTDOWN"}, 5)
    answered = time.monotonic()
    watches = [t for t in threading.enumerate() if t.name == f"qmp-watch {off.socket_path}"]
    assert answered - asked < 2.0 and watches  # the session is still open, not yet closing
    for watch in watches:
        watch.join(10)
        assert not watch.is_alive()


def test_a_stale_reader_never_ends_the_run_a_start_began_meanwhile(fake_qemu):
    backend = fake_qemu("shutdown")
    run = backend._run_folder("i-1")
    ended_pid = run.read_pid()
    assert ended_pid is not None
    backend.status("i-1")  # the run is ended and recorded
    run.begin_start(ended_pid + 1, Runtime(links={"eth0": True}))  # a Start's next run
    # a reader that saw the old run over, before the Start, ends it only now
    assert backend._end_run(run, ended_pid, ExitKind.CRASHED) is ExitKind.CRASHED
    assert run.read_exit() is None  # the new run's record is left alone
    assert run.read_runtime().links == {"eth0": True}


def test_a_guest_powered_off_after_our_shutdown_request_reads_requested(fake_qemu):
    backend = fake_qemu("shutdown")
    backend._run_folder("i-1").mark_stop_requested()
    assert backend.status("i-1").exit is ExitKind.REQUESTED


def test_after_a_withdrawn_shutdown_a_killed_qemu_reads_crashed(fake_qemu):
    backend = fake_qemu("running")
    run = backend._run_folder("i-1")
    run.mark_stop_requested()  # a shutdown the guest ignored
    backend.withdraw_stop("i-1")
    assert not run.stop_requested()
    pid = run.read_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert process.wait_gone(pid, str(run.qmp_socket), timeout=5)
    assert backend.status("i-1").exit is ExitKind.CRASHED  # Always and RerunOnFailure restart it


def test_a_guest_that_went_off_before_its_shutdown_was_withdrawn_reads_requested(fake_qemu):
    backend = fake_qemu("shutdown")
    backend._run_folder("i-1").mark_stop_requested()
    backend.withdraw_stop("i-1")
    assert backend.status("i-1").exit is ExitKind.REQUESTED


def test_a_guest_that_panicked_reads_crashed(fake_qemu):
    backend = fake_qemu("guest-panicked")
    status = backend.status("i-1")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.CRASHED)
    assert backend.running_machines() == []


def test_restart_of_a_stopped_machine_says_it_is_not_running(fake_qemu):
    backend = fake_qemu("shutdown")
    with pytest.raises(BackendError, match="i-1 is not running"):
        backend.restart("i-1")


def test_undefine_with_disk_names_removes_those_disks_files_only(short_dir, monkeypatch):
    from instances.backends.qemu.run_folder import disk_store
    from instances.services import device_work

    backend = backend_with_a_past_run(short_dir, pid=os.getpid(), stop_requested=True)
    store = disk_store(short_dir)
    store.mkdir(exist_ok=True)
    for name in ("disk-1", "disk-2"):
        (store / f"{name}.qcow2").write_bytes(b"QFI\xfb")
    monkeypatch.setattr(device_work, "backend_named", lambda name: backend)

    device_work.machine_undefine("qemu", "i-1", ["disk-1"])

    assert not (short_dir / "i-1").exists()
    assert sorted(path.name for path in store.iterdir()) == ["disk-2.qcow2"]


def test_force_stop_ends_a_qemu_whose_monitor_does_not_answer(fake_qemu):
    import fcntl

    backend = fake_qemu("running")
    backend.monitor_timeout = 0.2
    run = backend._run_folder("i-1")
    pid = run.read_pid()
    with open(run.qmp_socket.with_suffix(".lock"), "a") as stuck:
        fcntl.flock(stuck, fcntl.LOCK_EX)  # a caller hung in the monitor holds its turn
        backend.force_stop("i-1")
        assert not process.is_alive(pid, str(run.qmp_socket))
        status = backend.status("i-1")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.REQUESTED)


def test_a_status_read_during_a_starts_bookkeeping_leaves_the_new_run_alone(fake_qemu, monkeypatch):
    backend = fake_qemu("shutdown")
    run = backend._run_folder("i-1")
    ended_pid = run.read_pid()
    assert ended_pid is not None
    backend.status("i-1")  # the run is ended and recorded
    write_runtime = RunFolder.write_runtime

    def a_reader_lands_here(folder: RunFolder, runtime: Runtime) -> None:
        write_runtime(folder, runtime)
        backend.status("i-1")

    monkeypatch.setattr(RunFolder, "write_runtime", a_reader_lands_here)
    run.begin_start(ended_pid + 1, Runtime(links={"eth0": True}))
    assert run.read_exit() is None and run.read_pid() == ended_pid + 1


def test_a_free_disk_resized_meanwhile_grows_when_a_machine_takes_it(short_dir):
    from instances.backends.base import DiskSpec, MachineSpec
    from instances.backends.qemu.images import GIB

    backend = QemuBackend(short_dir, network_mode="user")
    machine = MachineSpec("i-1", "web-1", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=1024)
    backend.attach_disk(machine, DiskSpec("disk-3", "secondary", "virtio", size_gb=1))
    backend.detach_disk("i-1", "disk-3")  # free again; then grown to 2 GB in the console
    other = MachineSpec("i-2", "web-2", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=1024)

    backend.attach_disk(other, DiskSpec("disk-3", "secondary", "virtio", size_gb=2))

    assert backend.qemu_img.virtual_size(short_dir / "disks" / "disk-3.qcow2") == 2 * GIB


def test_undefine_ends_a_qemu_still_running_there(fake_qemu):
    backend = fake_qemu("running")
    pid = backend._run_folder("i-1").read_pid()
    backend.undefine("i-1")
    assert not process.is_alive(pid, str(backend.root / "i-1" / "qmp.sock"))
    assert not (backend.root / "i-1").exists()


def test_a_serial_log_past_its_limit_is_set_aside_at_the_next_start(short_dir):
    run = RunFolder(short_dir / "i-1")
    run.create()
    run.serial_log.write_bytes(b"x" * 100)
    run.rotate_serial_log(limit=1000)
    assert run.serial_log.stat().st_size == 100  # under the limit: kept
    run.rotate_serial_log(limit=50)
    assert not run.serial_log.exists()
    assert (run.path / "serial.log.1").read_bytes() == b"x" * 100
    run.rotate_serial_log(limit=50)  # nothing to set aside


def test_a_stopped_machines_snapshot_is_taken_and_deleted_with_qemu_img(short_dir):
    from instances.backends.base import DiskSpec, MachineSpec

    backend = QemuBackend(short_dir, network_mode="user")
    machine = MachineSpec("i-1", "web-1", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=1024)
    backend.attach_disk(machine, DiskSpec("disk-3", "secondary", "virtio", size_gb=1))
    disk = short_dir / "disks" / "disk-3.qcow2"

    assert (
        backend.snapshot_disks("i-1", [spec_of("disk-3")], "nightly") is False
    )  # no guest to freeze
    assert backend.snapshot_disks("i-1", [spec_of("disk-3")], "weekly") is False
    backend.delete_snapshot("i-1", "disk-3", "nightly")
    assert backend.qemu_img.snapshots(disk) == ["weekly"]
    backend.delete_snapshot("i-1", "disk-3", "nightly")  # gone already: nothing to do
    assert backend.qemu_img.snapshots(disk) == ["weekly"]

    backend.attach_disk(machine, DiskSpec("disk-4", "secondary", "sata", size_gb=1))
    assert (
        backend.snapshot_disks("i-1", [spec_of("disk-3"), spec_of("disk-4")], "weekly") is False
    )  # disk-3 has it
    assert backend.qemu_img.snapshots(disk) == ["weekly"]
    assert backend.qemu_img.snapshots(short_dir / "disks" / "disk-4.qcow2") == ["weekly"]


def test_a_disk_of_a_machine_that_never_started_gets_its_file_before_its_snapshot(short_dir):
    image = short_dir / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "1G"], check=True)
    backend = QemuBackend(short_dir, network_mode="user")
    root = DiskSpec("disk-5", "root", "virtio", size_gb=2, source=image)
    disk = short_dir / "disks" / "disk-5.qcow2"
    assert not disk.exists()  # nothing made it yet: the machine was never defined

    assert backend.snapshot_disks("i-7", [root, spec_of("disk-6")], "first") is False

    assert backend.qemu_img.snapshots(disk) == ["first"]
    assert backend.qemu_img.virtual_size(disk) == 2 * 1024**3  # as its spec says
    assert backend.qemu_img.info(disk, "qcow2")["backing-filename"] == str(image)
    assert backend.qemu_img.snapshots(short_dir / "disks" / "disk-6.qcow2") == ["first"]
    machine = MachineSpec("i-7", "web-7", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=1024)
    backend.define(dataclasses.replace(machine, disks=(root,)))  # the first start keeps it
    assert backend.qemu_img.snapshots(disk) == ["first"]


def test_a_stopped_machines_disk_is_reverted_to_a_snapshot_with_qemu_img(short_dir):
    from instances.backends.base import DiskSpec, MachineSpec

    backend = QemuBackend(short_dir, network_mode="user")
    machine = MachineSpec("i-1", "web-1", vcpus=1, sockets=1, cores=1, threads=1, memory_mb=1024)
    backend.attach_disk(machine, DiskSpec("disk-3", "secondary", "virtio", size_gb=1))
    disk = short_dir / "disks" / "disk-3.qcow2"

    def qemu_io(command: str) -> str:
        argv = ["qemu-io", "-f", "qcow2", "-c", command, str(disk)]
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout

    qemu_io("write -P 0x11 0 64k")
    backend.snapshot_disks("i-1", [spec_of("disk-3")], "before-upgrade")
    qemu_io("write -P 0x22 0 64k")  # the upgrade
    backend.resize_disk(machine, DiskSpec("disk-3", "secondary", "virtio", size_gb=2))
    assert backend.revert_snapshot("i-1", "disk-3", "before-upgrade") == 1  # its size then
    assert "Pattern verification failed" not in qemu_io("read -P 0x11 0 64k")
    assert backend.qemu_img.snapshots(disk) == ["before-upgrade"]  # kept, to go back again

    with pytest.raises(BackendError, match="disk-3 has no snapshot called nightly."):
        backend.revert_snapshot("i-1", "disk-3", "nightly")


def test_a_running_machines_disk_is_not_reverted(fake_qemu):
    backend = fake_qemu("running")
    with pytest.raises(BackendError, match="Stop the instance before reverting"):
        backend.revert_snapshot("i-1", "disk-1", "before-upgrade")


def test_an_event_before_the_negotiations_answer_costs_a_second_connection_not_an_error(
    fake_qemu,
):
    backend = fake_qemu("running", "event-first")
    assert backend.status("i-1").power is Power.RUNNING
