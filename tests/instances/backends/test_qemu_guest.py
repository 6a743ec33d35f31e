"""The QEMU backend against real guests (the demo image) under TCG.

Boots are the expensive part, so guests are shared: the `fleet` fixture starts three machines at
once and the tests use them in file order, the ones that end a guest's life last:
- alpha: generic kernel (SATA and e1000 drivers), a virtio root disk, a SATA disk, a CD-ROM,
  eth0 on the "lan" segment (10.77.0.11/24), eth1 e1000 with user-mode networking;
- bravo: cloud kernel, eth0 on "lan" (10.77.0.12/24);
- uefi: OVMF with Secure Boot, persistent EFI vars and a vTPM (swtpm).
Machines for adoption and crash tests never wait for their guest to boot.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from instances.backends.base import (
    BackendError,
    CloudInitSeed,
    DiskSpec,
    ExitKind,
    FirmwareSpec,
    MachineSpec,
    MachineStatus,
    NicSpec,
    Power,
)
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.agent import GuestAgent
from instances.backends.qemu.process import is_alive
from tests.instances.agent import agent_facts

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
IMAGE = REPO / "var" / "images" / "demo"
BOOT_TIMEOUT = 180  # TCG on a busy 2-core machine can be slow; a normal boot takes 5-20 s
SSH_KEY = ed25519.Ed25519PrivateKey.generate()  # ada's, in the guests' seeds


@pytest.fixture(scope="session")
def demo_image() -> Path:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    if not (IMAGE / "vmlinuz").is_file() or not (IMAGE / "initrd.img").is_file():
        build = subprocess.run(
            ["bash", str(REPO / "scripts" / "build_demo_image.sh"), str(IMAGE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if build.returncode != 0:
            pytest.fail(f"the demo image could not be built: {build.stderr.strip()[-300:]}")
    return IMAGE


@pytest.fixture(scope="module")
def backend(demo_image: Path) -> Iterator[QemuBackend]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="zq"))
    namespace = f"zqtest-{root.name[2:]}"
    backend = QemuBackend(root, images=demo_image, namespace=namespace)
    try:
        yield backend
    finally:
        try:
            for machine_id in backend.running_machines():
                backend.force_stop(machine_id)
            for folder in root.iterdir():
                if folder.is_dir():
                    backend.undefine(folder.name)
        finally:
            if backend.network_mode == "bridge":
                subprocess.run(["ip", "netns", "del", namespace], check=False)
            shutil.rmtree(root, ignore_errors=True)


def spec_of(disk_name: str) -> DiskSpec:
    """A one-GB secondary virtio disk's spec: what a snapshot names a disk by."""
    return DiskSpec(disk_name, "secondary", "virtio", size_gb=1)


def machine(machine_id: str, **changes) -> MachineSpec:
    values = dict(
        id=machine_id,
        name=machine_id,
        vcpus=1,
        sockets=1,
        cores=1,
        threads=1,
        memory_mb=256,
        kernel=Path("vmlinuz"),
        initrd=Path("initrd.img"),
    )
    values.update(changes)
    return MachineSpec(**values)


def seed(hostname: str, address: str, mac: str) -> CloudInitSeed:
    network = f"""\
        version: 2
        ethernets:
          lan:
            match:
              macaddress: "{mac}"
            addresses: [{address}]
        """
    user = f"""\
        #cloud-config
        users:
          - name: ada
            plain_text_passwd: lovelace
            ssh_authorized_keys: ["{SSH_KEY.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()} ada@host"]
        ssh_pwauth: false
        runcmd:
          - echo seeded > /run/seeded
        """
    return CloudInitSeed(
        meta_data=f"instance-id: {hostname}\nlocal-hostname: {hostname}\n",
        user_data=textwrap.dedent(user),
        network_config=textwrap.dedent(network),
    )


ALPHA = machine(
    "alpha",
    kernel=Path("vmlinuz-generic"),
    disks=(
        DiskSpec("disk-1", "root", "virtio", size_gb=1, boot_order=1),
        DiskSpec("disk-2", "secondary", "sata", size_gb=1),
        DiskSpec("cd-1", "cdrom", "sata"),
    ),
    nics=(
        NicSpec("eth0", "52:54:00:77:00:11", "virtio", network="lan", gateway="10.77.0.1/24"),
        NicSpec("eth1", "52:54:00:77:01:11", "e1000"),
    ),
    seed=seed("alpha", "10.77.0.11/24", "52:54:00:77:00:11"),
)
BRAVO = machine(
    "bravo",
    disks=(DiskSpec("disk-b1", "root", "virtio", size_gb=1, boot_order=1),),
    nics=(
        NicSpec("eth0", "52:54:00:77:00:12", "virtio", network="lan", gateway="10.77.0.1/24"),
        NicSpec("eth1", "52:54:00:77:01:12", "virtio", link_up=False),
    ),
    seed=seed("bravo", "10.77.0.12/24", "52:54:00:77:00:12"),
)
UEFI = machine(
    "uefi",
    firmware=FirmwareSpec(bootloader="uefi", secure_boot=True, persistent_efi=True, vtpm=True),
    disks=(DiskSpec("disk-u1", "root", "virtio", size_gb=1),),
    seed=seed("uefi", "10.78.0.2/24", "52:54:00:78:00:02"),
    nics=(NicSpec("eth0", "52:54:00:78:00:02", "virtio"),),
)


@pytest.fixture(scope="module")
def fleet(backend: QemuBackend) -> None:
    """Start the shared guests together so that their boots overlap."""
    for spec in (ALPHA, BRAVO, UEFI):
        assert backend.start(spec)


def wait_for_output(
    backend: QemuBackend, machine_id: str, text: str, *, since: int = 0, count: int = 1
) -> None:
    """Until the serial log holds text (count times) after byte offset since."""
    log = backend.serial_log(machine_id)
    deadline = time.monotonic() + BOOT_TIMEOUT
    while log.read_bytes()[since:].count(text.encode()) < count:
        assert time.monotonic() < deadline, f"{machine_id} never printed {text!r}"
        assert backend.status(machine_id).power is Power.RUNNING, f"{machine_id} stopped"
        time.sleep(0.1)


def wait_for_prompt(backend: QemuBackend, machine_id: str) -> None:
    wait_for_output(backend, machine_id, f"root@{machine_id}:/# ")


def type_on_serial(backend: QemuBackend, machine_id: str, text: str) -> None:
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(backend.console_socket(machine_id, "serial")))
        console.sendall(text.encode())
        time.sleep(0.3)  # let the UART drain before the socket closes


def wait_until_stopped(backend: QemuBackend, machine_id: str, timeout: float = 30) -> MachineStatus:
    deadline = time.monotonic() + timeout
    while (status := backend.status(machine_id)).power is Power.RUNNING:
        assert time.monotonic() < deadline, f"{machine_id} is still running"
        time.sleep(0.1)
    return status


def run_in(backend: QemuBackend, machine_id: str, script: str) -> str:
    code, output = backend.guest_exec(machine_id, ["sh", "-c", script], timeout=30)
    assert code == 0, output
    return output


# ---- alpha and bravo: booted, seeded, networked ------------------------------------------------


def test_the_serial_console_shows_a_prompt_and_takes_commands(backend, fleet):
    for machine_id in ("alpha", "bravo"):
        wait_for_prompt(backend, machine_id)
    assert not backend.start(ALPHA)  # running: left alone
    offset = backend.serial_log("bravo").stat().st_size
    type_on_serial(backend, "bravo", "echo zq-$((6 * 7))\n")
    wait_for_output(backend, "bravo", "zq-42", since=offset)


def test_the_exec_channel_is_a_shell_on_its_own_socket(backend, fleet):
    wait_for_prompt(backend, "bravo")
    with socket.socket(socket.AF_UNIX) as channel:
        channel.settimeout(10)
        channel.connect(str(backend.console_socket("bravo", "exec")))
        channel.sendall(b"echo zq-$((6 * 7))\n")
        received = b""
        while b"zq-42" not in received:
            received += channel.recv(4096)


def test_the_vnc_socket_speaks_rfb(backend, fleet):
    with socket.socket(socket.AF_UNIX) as vnc:
        vnc.settimeout(10)
        vnc.connect(str(backend.console_socket("alpha", "vnc")))
        assert vnc.recv(12).startswith(b"RFB 003.")


def test_the_seed_sets_the_hostname_and_the_static_ip(backend, fleet):
    wait_for_prompt(backend, "alpha")
    assert run_in(backend, "alpha", "hostname").strip() == "alpha"
    assert "inet 10.77.0.11/24" in run_in(backend, "alpha", "ip -4 addr show eth0")
    assert run_in(backend, "alpha", "cat /run/seeded; grep -c ^ada: /etc/passwd").split() == [
        "seeded",
        "1",
    ]


def test_the_guest_agent_reports_the_hostname_the_static_ip_and_memory(backend, fleet):
    wait_for_prompt(backend, "bravo")
    facts = agent_facts(backend, "bravo")
    assert facts.hostname == "bravo" and facts.os  # /etc/os-release's PRETTY_NAME
    eth0 = next(i for i in facts.interfaces if i.mac == "52:54:00:77:00:12")
    assert "10.77.0.12/24" in eth0.addresses
    assert 100_000 < facts.memory_total_kb < 262_144
    assert any(fs["mountpoint"] == "/data" for fs in facts.filesystems)


def test_callers_of_one_machine_take_turns_on_its_monitor_and_agent(backend, fleet):
    # QEMU drops a second client of a busy monitor (the agent's channel keeps it waiting): a
    # reconciler's status read landing in a power task's exchange would fail one of them.
    wait_for_prompt(backend, "alpha")
    agent_facts(backend, "alpha")  # its agent runs: every call below is answered
    failures: list[BaseException] = []

    def use(call) -> None:  # type: ignore[no-untyped-def]
        for _ in range(20):
            try:
                call()
            except BackendError as error:
                failures.append(error)

    callers = [
        threading.Thread(target=use, args=(call,))
        for call in (
            lambda: backend.status("alpha"),
            lambda: backend.status("alpha"),
            lambda: backend.guest_facts("alpha"),
            lambda: backend.guest_exec("alpha", ["true"]),
        )
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert failures == []


def test_a_sata_disk_and_an_e1000_nic_appear_in_the_guest(backend, fleet):
    wait_for_prompt(backend, "alpha")
    assert run_in(backend, "alpha", "cat /sys/block/sda/device/vendor").strip() == "ATA"
    drivers = run_in(
        backend,
        "alpha",
        "for n in eth0 eth1; do basename $(readlink /sys/class/net/$n/device/driver); done",
    )
    assert drivers.split() == ["virtio_net", "e1000"]


def test_two_guests_on_one_network_ping_each_other(backend, fleet):
    if backend.network_mode != "bridge":
        pytest.skip("bridged networking needs root; this backend runs user-mode networking")
    for machine_id in ("alpha", "bravo"):
        wait_for_prompt(backend, machine_id)
    assert " 0% packet loss" in run_in(backend, "alpha", "ping -c 3 -W 5 10.77.0.12")
    assert " 0% packet loss" in run_in(backend, "bravo", "ping -c 3 -W 5 10.77.0.11")


def test_the_host_side_of_a_network_reaches_a_guest_over_ssh_with_its_seeded_key(
    backend, fleet, tmp_path
):
    if backend.network_mode != "bridge":
        pytest.skip("bridged networking needs root; this backend runs user-mode networking")
    if shutil.which("ssh") is None:
        pytest.fail("the OpenSSH client is not installed (apt-get install openssh-client)")
    wait_for_prompt(backend, "alpha")
    key = tmp_path / "ada"
    key.write_bytes(SSH_KEY.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    key.chmod(0o600)
    ssh = [*backend.networks.exec_prefix(), "ssh", "-i", str(key), "-o", "BatchMode=yes",
           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "-o", "ConnectTimeout=30"]  # fmt: skip
    deadline = time.monotonic() + 60  # the guest's seed adds the key after the prompt shows
    while True:
        result = subprocess.run(
            [*ssh, "ada@10.77.0.11", "id -un; hostname"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert result.stdout.split() == ["ada", "alpha"], result.stderr
    # without the key there is no way in
    refused = subprocess.run(
        [*ssh[:5], *ssh[7:], "-o", "PasswordAuthentication=no", "ada@10.77.0.11", "true"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    # the seed's ssh_pwauth: false and cloud-init's default disable_root reach dropbear
    options = run_in(backend, "alpha", "tr '\\0' ' ' </proc/$(cat /run/dropbear.pid)/cmdline")
    assert {"-s", "-w"} <= set(options.split())
    # its host key is on the data disk, so it is the same after a reboot
    keys = run_in(backend, "alpha", "readlink /etc/dropbear; ls /data/.ssh-host-keys")
    assert keys.split()[0] == "/data/.ssh-host-keys" and "dropbear_ed25519_host_key" in keys
    # the namespace that holds the gateways routes nothing between segments
    forwarding = [*backend.networks.exec_prefix(), "cat", "/proc/sys/net/ipv4/ip_forward"]
    assert subprocess.run(forwarding, capture_output=True, text=True).stdout.strip() == "0"


def test_link_down_takes_the_carrier_away_in_the_guest(backend, fleet):
    wait_for_prompt(backend, "alpha")
    carrier = "cat /sys/class/net/eth0/carrier"
    assert run_in(backend, "alpha", carrier).strip() == "1"
    backend.set_link("alpha", "eth0", False)
    assert run_in(backend, "alpha", carrier).strip() == "0"
    # the guest agent reports it, as the guest's drivers see it
    seen = {nic.name: nic.carrier for nic in backend.guest_facts("alpha").interfaces}
    assert seen == {"eth0": False, "eth1": True}
    assert backend.status("alpha").links == {"eth0": False, "eth1": True}
    assert backend.set_link("alpha", "eth0", True) is True
    assert run_in(backend, "alpha", carrier).strip() == "1"
    assert backend.status("alpha").links["eth0"] is True
    assert backend.set_link("alpha", "eth7", False) is False  # not in this run: nothing to set


def test_a_link_taken_down_before_the_start_is_down_from_the_guests_first_moment(backend, fleet):
    wait_for_prompt(backend, "bravo")
    carrier = "ip link set eth1 up; sleep 0.5; cat /sys/class/net/eth1/carrier"
    assert run_in(backend, "bravo", carrier).strip() == "0"
    assert backend.status("bravo").links == {"eth0": True, "eth1": False}
    monitor = backend._monitor(backend._run_folder("bravo"))
    assert monitor.execute("query-status")["status"] == "running"  # let go once the link was down


def test_a_snapshot_of_a_running_disk_is_taken_inside_an_fsfreeze_and_deleted_by_qemu(
    backend, fleet, monkeypatch
):
    wait_for_prompt(backend, "alpha")
    seen_while_frozen = []
    real_freeze = GuestAgent.freeze

    def freeze_and_look(agent: GuestAgent) -> int:
        frozen = real_freeze(agent)
        seen_while_frozen.append((frozen, agent.freeze_status()))
        return frozen

    monkeypatch.setattr(GuestAgent, "freeze", freeze_and_look)
    assert backend.snapshot_disks("alpha", [spec_of("disk-1")], "before-upgrade") is True
    assert seen_while_frozen == [(1, "frozen")]  # /data, the one disk-backed filesystem
    assert backend.qemu_img.snapshots(backend.root / "disks" / "disk-1.qcow2") == ["before-upgrade"]
    assert GuestAgent(backend.root / "alpha" / "qga.sock").freeze_status() == "thawed"
    run_in(backend, "alpha", "echo after > /data/mark")  # writable again

    # a retry of an attempt that took the snapshot, its answer lost, and left the guest frozen
    agent = GuestAgent(backend.root / "alpha" / "qga.sock")
    real_freeze(agent)
    assert backend.snapshot_disks("alpha", [spec_of("disk-1")], "before-upgrade") is False
    assert agent.freeze_status() == "thawed"
    assert backend.qemu_img.snapshots(backend.root / "disks" / "disk-1.qcow2") == ["before-upgrade"]

    backend.delete_snapshot("alpha", "disk-1", "before-upgrade")  # by QEMU, as it runs
    assert backend.qemu_img.snapshots(backend.root / "disks" / "disk-1.qcow2") == []
    backend.delete_snapshot("alpha", "disk-1", "before-upgrade")  # gone already


def test_the_disks_of_a_running_machine_are_snapshotted_together_under_one_freeze(
    backend, fleet, monkeypatch
):
    wait_for_prompt(backend, "alpha")
    backend.attach_disk(ALPHA, DiskSpec("disk-8", "secondary", "virtio", size_gb=1))
    freezes = []
    real_freeze = GuestAgent.freeze

    def counted(agent: GuestAgent) -> int:
        freezes.append(agent.freeze_status())
        return real_freeze(agent)

    monkeypatch.setattr(GuestAgent, "freeze", counted)
    try:
        assert (
            backend.snapshot_disks("alpha", [spec_of("disk-1"), spec_of("disk-8")], "together")
            is True
        )
        assert freezes == ["thawed"]  # one freeze for both
        for disk in ("disk-1", "disk-8"):
            path = backend.root / "disks" / f"{disk}.qcow2"
            assert "together" in backend.qemu_img.snapshots(path)
        assert GuestAgent(backend.root / "alpha" / "qga.sock").freeze_status() == "thawed"
        # all or none: a disk the machine does not have stops it before anything is taken
        with pytest.raises(BackendError, match="has no disk disk-7"):
            backend.snapshot_disks("alpha", [spec_of("disk-1"), spec_of("disk-7")], "half")
        assert "half" not in backend.qemu_img.snapshots(backend.root / "disks" / "disk-1.qcow2")
        assert freezes == ["thawed"]
        for disk in ("disk-1", "disk-8"):
            backend.delete_snapshot("alpha", disk, "together")
    finally:
        backend.detach_disk("alpha", "disk-8")


def test_a_virtio_disk_is_hot_plugged_grown_and_unplugged_while_running(backend, fleet):
    wait_for_prompt(backend, "alpha")
    extra = DiskSpec("disk-9", "secondary", "virtio", size_gb=1, serial="EXTRA9")
    backend.attach_disk(ALPHA, extra)
    find = 'for d in /sys/block/vd*; do [ "$(cat $d/serial)" = EXTRA9 ] && basename $d; done; true'
    deadline = time.monotonic() + 20
    while not (name := run_in(backend, "alpha", find).strip()):
        assert time.monotonic() < deadline, "the hot-plugged disk never appeared"
        time.sleep(0.2)
    backend.resize_disk(ALPHA, DiskSpec("disk-9", "secondary", "virtio", size_gb=2))
    assert run_in(backend, "alpha", f"cat /sys/block/{name}/size").strip() == str(2 * 2**21)
    backend.detach_disk("alpha", "disk-9")
    assert run_in(backend, "alpha", find).strip() == ""


def test_a_cdrom_takes_an_iso_and_gives_it_back_while_running(backend, fleet):
    wait_for_prompt(backend, "alpha")
    mount = "mount -t iso9660 -o ro /dev/sr0 /mnt && ls /mnt && umount /mnt"
    backend.change_cdrom("alpha", "cd-1", backend.root / "alpha" / "seed.iso")  # any ISO will do
    # the guest kernel notices the new medium on its own schedule: the first open may fail
    deadline = time.monotonic() + 10
    while (result := backend.guest_exec("alpha", ["sh", "-c", mount]))[0] != 0:
        assert time.monotonic() < deadline, result[1]
        time.sleep(0.5)
    assert "meta-data" in result[1].split()
    backend.change_cdrom("alpha", "cd-1", None)
    code, output = backend.guest_exec("alpha", ["sh", "-c", mount])
    assert code != 0 and "No medium" in output


def test_restart_reboots_the_guest_and_its_boot_counter_goes_up(backend, fleet):
    wait_for_prompt(backend, "bravo")
    assert run_in(backend, "bravo", "cat /data/boot-count").strip() == "1"
    offset = backend.serial_log("bravo").stat().st_size
    backend.restart("bravo")  # through the guest agent: the guest's own reboot
    wait_for_output(backend, "bravo", "zopday-demo: shutdown: reboot", since=offset)
    wait_for_output(backend, "bravo", "root@bravo:/# ", since=offset)
    assert run_in(backend, "bravo", "cat /data/boot-count").strip() == "2"
    assert backend.status("bravo").boots == 1


def test_restart_of_a_guest_without_an_agent_resets_it_at_once(backend, fleet):
    wait_for_prompt(backend, "alpha")
    count = int(run_in(backend, "alpha", "cat /data/boot-count"))
    boots = backend.status("alpha").boots
    run = backend._run_folder("alpha")
    assert backend._agent_listening(run)
    # the agent goes, and does not come back until the next boot (its binary is moved away)
    run_in(
        backend, "alpha", 'mv "$(command -v qemu-ga)" /root/qemu-ga.off; '
        "(sleep 1; killall qemu-ga) >/dev/null 2>&1 &",
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while backend._agent_listening(run):
        assert time.monotonic() < deadline, "the guest agent never stopped"
        time.sleep(0.2)
    asked = time.monotonic()
    assert (
        backend.snapshot_disks("alpha", [spec_of("disk-1")], "without-agent") is False
    )  # unfrozen
    assert time.monotonic() - asked < backend.agent_timeout
    assert "without-agent" in backend.qemu_img.snapshots(backend.root / "disks" / "disk-1.qcow2")
    offset = backend.serial_log("alpha").stat().st_size
    asked = time.monotonic()
    backend.restart("alpha")  # a hard reset, without waiting out the agent's timeout
    assert time.monotonic() - asked < backend.agent_timeout
    wait_for_output(backend, "alpha", "root@alpha:/# ", since=offset)
    assert int(run_in(backend, "alpha", "cat /data/boot-count")) == count + 1
    assert b"zopday-demo: shutdown" not in backend.serial_log("alpha").read_bytes()[offset:]
    assert backend.status("alpha").boots == boots + 1


def test_an_acpi_shutdown_we_asked_for_reads_requested(backend, fleet):
    wait_for_prompt(backend, "alpha")
    assert not backend.wait_powered_off("alpha", 0.2)  # running: the wait times out
    backend.shutdown("alpha")
    assert backend.wait_powered_off("alpha", 30)  # woken by QEMU's SHUTDOWN event
    assert backend.wait_powered_off("alpha", 0)  # and it stays off
    status = backend.status("alpha")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.REQUESTED)
    assert "alpha" not in backend.running_machines()


def test_a_poweroff_typed_in_the_guest_reads_guest_poweroff(backend, fleet):
    wait_for_prompt(backend, "bravo")
    type_on_serial(backend, "bravo", "poweroff\n")
    status = wait_until_stopped(backend, "bravo")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.GUEST_POWEROFF)
    assert "reboot: Power down" in backend.serial_log("bravo").read_text(errors="replace")


def test_taps_and_bridges_go_away_with_the_last_machine_on_a_network(backend, fleet):
    if backend.network_mode != "bridge":
        pytest.skip("bridged networking needs root; this backend runs user-mode networking")
    for machine_id in ("alpha", "bravo"):
        if backend.status(machine_id).power is Power.RUNNING:
            backend.force_stop(machine_id)
    links = subprocess.run(
        ["ip", "-n", backend.networks.namespace, "-o", "link"], capture_output=True, text=True
    ).stdout
    assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]


# ---- uefi: OVMF with Secure Boot and a vTPM ------------------------------------------------------


def test_uefi_secure_boot_and_a_vtpm_are_seen_by_the_guest_kernel(backend, fleet):
    wait_for_prompt(backend, "uefi")
    log = backend.serial_log("uefi").read_text(errors="replace")
    assert "efi: EFI v2" in log
    assert "secureboot: Secure boot enabled" in log
    assert "tpm_crb MSFT0101:00" in run_in(backend, "uefi", "dmesg")
    assert run_in(backend, "uefi", "ls /dev/tpm0").strip() == "/dev/tpm0"
    backend.force_stop("uefi")
    assert not backend.swtpm.is_running(backend._run_folder("uefi"))
    assert (backend.root / "uefi" / "OVMF_VARS.fd").is_file()  # persistent EFI keeps its vars


# ---- process life: adoption, crash, force stop, start errors ---------------------------------------

STRAY = machine("stray", nics=(NicSpec("eth0", "52:54:00:79:00:01", "virtio"),))


def test_a_machine_started_by_a_process_that_has_exited_is_adopted_as_running(backend):
    starter = f"""
        from pathlib import Path, PosixPath
        from instances.backends.base import FirmwareSpec, MachineSpec, NicSpec
        from instances.backends.qemu import QemuBackend
        backend = QemuBackend(Path({str(backend.root)!r}), images=Path({str(IMAGE)!r}),
                              network_mode="user")
        backend.start({STRAY!r})
        """
    subprocess.run([sys.executable, "-c", textwrap.dedent(starter)], cwd=REPO, check=True)
    fresh = QemuBackend(backend.root, images=IMAGE, network_mode="user")
    status = fresh.status("stray")
    assert status.power is Power.RUNNING and status.pid is not None
    assert "stray" in fresh.running_machines()


def test_kill_9_of_the_qemu_process_reads_crashed(backend):
    status = backend.status("stray")
    if status.power is not Power.RUNNING:
        backend.start(STRAY)
        status = backend.status("stray")
    assert status.pid is not None
    os.kill(status.pid, signal.SIGKILL)
    status = wait_until_stopped(backend, "stray")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.CRASHED)


def test_a_guest_kernel_panic_reads_crashed(backend):
    if backend.status("stray").power is not Power.RUNNING:
        backend.start(STRAY)
    deadline = time.monotonic() + BOOT_TIMEOUT
    while not backend._agent_listening(backend._run_folder("stray")):  # up, without a seed
        assert time.monotonic() < deadline, "stray never started its guest agent"
        time.sleep(0.2)
    run_in(backend, "stray", "(sleep 0.5; echo c > /proc/sysrq-trigger) >/dev/null 2>&1 &")
    status = wait_until_stopped(backend, "stray")  # pvpanic told QEMU, which paused the guest
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.CRASHED)
    assert "sysrq triggered crash" in backend.serial_log("stray").read_text(errors="replace")


def test_force_stop_ends_qemu_at_once_and_reads_requested(backend):
    backend.start(STRAY)
    pid = backend.status("stray").pid
    backend.force_stop("stray")
    status = backend.status("stray")
    assert (status.power, status.exit) == (Power.STOPPED, ExitKind.REQUESTED)
    assert pid is not None and not is_alive(pid, "qemu")  # gone, or a zombie awaiting init


def test_a_qemu_that_cannot_start_reports_its_own_reason(backend):
    broken = machine("broken", vcpus=4)  # more vCPUs than sockets * cores * threads
    with pytest.raises(BackendError, match="^QEMU failed to start: Invalid CPU topology"):
        backend.start(broken)
    assert backend.status("broken").exit is ExitKind.NONE
