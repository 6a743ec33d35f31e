"""The QEMU command line, built from specs alone: no QEMU runs here."""

import json
from pathlib import Path

import pytest

from instances.backends.base import (
    HOTPLUG_DISKS,
    BackendError,
    CloudInitSeed,
    DiskSpec,
    FirmwareSpec,
    MachineSpec,
    NicSpec,
)
from instances.backends.qemu.cmdline import LaunchOptions, build_argv
from instances.backends.qemu.firmware import firmware_for
from instances.backends.qemu.run_folder import RunFolder

RUN = RunFolder(Path("/run/zq/i-7"))


def make_spec(**changes) -> MachineSpec:
    values = dict(id="i-7", name="web", vcpus=2, sockets=1, cores=2, threads=1, memory_mb=512)
    values.update(changes)
    return MachineSpec(**values)


def argv_for(spec: MachineSpec, **options) -> list[str]:
    return build_argv(spec, RUN, LaunchOptions(**options))


def values_of(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def devices(argv: list[str], driver: str) -> list[str]:
    return [d for d in values_of(argv, "-device") if d.split(",")[0] == driver]


def test_a_machine_is_q35_under_tcg_with_the_sizes_of_its_spec():
    argv = argv_for(make_spec())
    assert argv[0] == "qemu-system-x86_64"
    assert values_of(argv, "-machine") == ["q35"]
    assert values_of(argv, "-accel") == ["tcg"]
    assert values_of(argv, "-smp") == ["cpus=2,sockets=1,cores=2,threads=1"]
    assert values_of(argv, "-m") == ["512"]
    assert values_of(argv, "-name") == ["guest=web"]


def test_a_paused_launch_waits_for_the_monitor_before_the_guest_runs():
    assert "-S" not in argv_for(make_spec())
    assert "-S" in argv_for(make_spec(), paused=True)


def test_kvm_with_fallback_lists_both_accelerators_and_keeps_the_default_cpu():
    argv = argv_for(make_spec(), accel="kvm:tcg")
    assert values_of(argv, "-accel") == ["kvm", "tcg"]
    assert "-cpu" not in argv


def test_kvm_alone_passes_the_host_cpu_through():
    argv = argv_for(make_spec(), accel="kvm")
    assert values_of(argv, "-accel") == ["kvm"] and values_of(argv, "-cpu") == ["host"]


def test_an_unknown_accelerator_is_refused():
    with pytest.raises(BackendError, match="Unknown accelerator"):
        argv_for(make_spec(), accel="hvf")


def test_guest_poweroff_and_panic_leave_qemu_alive_in_a_status_we_can_read():
    argv = argv_for(make_spec())
    assert "-no-shutdown" in argv
    assert values_of(argv, "-action") == ["panic=pause"]
    assert devices(argv, "pvpanic")


def test_there_are_no_default_devices_and_no_window_but_a_vga_for_vnc():
    argv = argv_for(make_spec())
    assert "-nodefaults" in argv and values_of(argv, "-display") == ["none"]
    assert values_of(argv, "-vnc") == ["unix:/run/zq/i-7/vnc.sock"]
    assert devices(argv, "VGA")


def test_monitor_and_consoles_are_unix_sockets_in_the_run_folder():
    chardevs = values_of(argv_for(make_spec()), "-chardev")
    assert "socket,id=qmp,path=/run/zq/i-7/qmp.sock,server=on,wait=off" in chardevs
    # a second monitor, for the one who waits for a power-off
    assert "socket,id=watch,path=/run/zq/i-7/watch.sock,server=on,wait=off" in chardevs
    assert values_of(argv_for(make_spec()), "-mon") == [
        "chardev=qmp,mode=control",
        "chardev=watch,mode=control",
    ]
    assert "socket,id=agent,path=/run/zq/i-7/qga.sock,server=on,wait=off" in chardevs
    assert "socket,id=exec,path=/run/zq/i-7/exec.sock,server=on,wait=off" in chardevs


def test_the_serial_port_is_recorded_to_a_log_even_without_a_client():
    argv = argv_for(make_spec())
    assert (
        "socket,id=serial0,path=/run/zq/i-7/serial.sock,server=on,wait=off,"
        "logfile=/run/zq/i-7/serial.log,logappend=on"
    ) in values_of(argv, "-chardev")
    assert values_of(argv, "-serial") == ["chardev:serial0"]


def test_the_agent_and_exec_channels_are_named_virtio_serial_ports():
    ports = devices(argv_for(make_spec()), "virtserialport")
    assert "virtserialport,bus=vserial.0,chardev=agent,name=org.qemu.guest_agent.0" in ports
    assert "virtserialport,bus=vserial.0,chardev=exec,name=org.zopday.exec.0" in ports


def test_qemu_daemonizes_and_writes_its_pid_to_the_run_folder():
    argv = argv_for(make_spec())
    assert "-daemonize" in argv and values_of(argv, "-pidfile") == ["/run/zq/i-7/qemu.pid"]


def test_virtio_disks_sit_behind_root_ports_and_spare_ports_stay_for_hotplug():
    spec = make_spec(
        disks=(
            DiskSpec("disk-1", "root", "virtio", size_gb=2, boot_order=1),
            DiskSpec("disk-2", "secondary", "virtio", size_gb=1, serial="DATA2"),
        )
    )
    argv = argv_for(spec)
    assert len(devices(argv, "pcie-root-port")) == 2 + HOTPLUG_DISKS
    assert devices(argv, "virtio-blk-pci") == [
        "virtio-blk-pci,id=disk-1,bus=rp0,drive=disk-1-blk,bootindex=1",
        "virtio-blk-pci,id=disk-2,bus=rp1,drive=disk-2-blk,serial=DATA2",
    ]
    assert {
        "driver": "qcow2",
        "node-name": "disk-1-blk",
        "file": {"driver": "file", "filename": "/run/zq/disks/disk-1.qcow2"},
        "backing": None,
    } in [json.loads(value) for value in values_of(argv, "-blockdev") if value.startswith("{")]


def test_a_disk_made_over_an_image_opens_that_image_alone_whatever_its_headers_name():
    spec = make_spec(
        disks=(
            DiskSpec("disk-1", "root", "virtio", 2, source=Path("/images/uploads/a/3.qcow2")),
            DiskSpec("cd-1", "cdrom", "sata", source=Path("/images/uploads/a/4.iso")),
        ),
        seed=CloudInitSeed(meta_data="", user_data=""),
    )
    argv = argv_for(spec, firmware=firmware_for(FirmwareSpec(bootloader="uefi")))
    qcow2 = json.loads(values_of(argv, "-blockdev")[0])
    assert qcow2["backing"] == {
        "driver": "qcow2",
        "node-name": "disk-1-base",
        "read-only": True,
        "file": {"driver": "file", "filename": "/images/uploads/a/3.qcow2"},
        "backing": None,
    }
    for value in values_of(argv, "-blockdev"):  # every image with its format named
        assert value.startswith(("{", "driver=qcow2,", "driver=raw,"))
    assert [value for value in values_of(argv, "-drive") if ",format=raw," not in value] == []


def test_sata_disks_and_cdroms_take_the_ahci_ports_in_order():
    spec = make_spec(
        disks=(
            DiskSpec("disk-1", "root", "sata", size_gb=2, boot_order=2),
            DiskSpec("cd-1", "cdrom", "sata", source=Path("/isos/debian.iso"), boot_order=1),
            DiskSpec("cd-2", "cdrom", "sata"),
        )
    )
    argv = argv_for(spec)
    assert devices(argv, "ide-hd") == ["ide-hd,id=disk-1,bus=ide.0,drive=disk-1-blk,bootindex=2"]
    assert devices(argv, "ide-cd") == [
        "ide-cd,id=cd-1,bus=ide.1,drive=cd-1-blk,bootindex=1",
        "ide-cd,id=cd-2,bus=ide.2",  # an empty tray
    ]
    assert (
        "driver=raw,node-name=cd-1-blk,read-only=on,file.driver=file,file.filename=/isos/debian.iso"
        in values_of(argv, "-blockdev")
    )


def test_more_sata_devices_than_ahci_ports_are_refused():
    spec = make_spec(disks=tuple(DiskSpec(f"d{i}", "secondary", "sata", 1) for i in range(7)))
    with pytest.raises(BackendError, match="At most 6"):
        argv_for(spec)


def test_the_seed_is_a_read_only_virtio_disk_that_is_not_hot_pluggable():
    argv = argv_for(make_spec(seed=CloudInitSeed(meta_data="", user_data="")))
    assert "virtio-blk-pci,drive=cidata-blk,id=cidata" in devices(argv, "virtio-blk-pci")
    assert (
        "driver=raw,node-name=cidata-blk,read-only=on,file.driver=file,"
        "file.filename=/run/zq/i-7/seed.iso" in values_of(argv, "-blockdev")
    )


def test_bridged_nics_use_their_tap_and_the_others_user_networking():
    spec = make_spec(
        nics=(
            NicSpec("eth0", "52:54:00:00:00:01", "virtio", network="net-1"),
            NicSpec("eth1", "52:54:00:00:00:02", "e1000"),
        )
    )
    argv = argv_for(spec, taps={"eth0": "zt0123456789a"})
    assert values_of(argv, "-netdev") == [
        "tap,id=net-eth0,ifname=zt0123456789a,script=no,downscript=no",
        "user,id=net-eth1",
    ]
    assert devices(argv, "virtio-net-pci") == [
        "virtio-net-pci,netdev=net-eth0,mac=52:54:00:00:00:01,id=eth0"
    ]
    assert devices(argv, "e1000") == ["e1000,netdev=net-eth1,mac=52:54:00:00:00:02,id=eth1"]


def test_an_unknown_nic_model_is_refused():
    with pytest.raises(BackendError, match="unknown model"):
        argv_for(make_spec(nics=(NicSpec("eth0", "52:54:00:00:00:01", "rtl8139"),)))


def test_uefi_boots_ovmf_code_read_only_with_the_machines_own_vars():
    firmware = firmware_for(FirmwareSpec(bootloader="uefi"))
    argv = argv_for(make_spec(firmware=FirmwareSpec(bootloader="uefi")), firmware=firmware)
    assert values_of(argv, "-drive") == [
        "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
        "if=pflash,format=raw,unit=1,file=/run/zq/i-7/OVMF_VARS.fd",
    ]
    assert values_of(argv, "-machine") == ["q35"]


def test_secure_boot_uses_the_secboot_code_with_smm_and_a_secure_flash():
    spec = make_spec(firmware=FirmwareSpec(bootloader="uefi", secure_boot=True))
    firmware = firmware_for(spec.firmware)
    assert firmware is not None and firmware.vars_template.name == "OVMF_VARS_4M.ms.fd"
    argv = argv_for(spec, firmware=firmware)
    assert values_of(argv, "-machine") == ["q35,smm=on"]
    assert values_of(argv, "-global") == ["driver=cfi.pflash01,property=secure,value=on"]
    assert values_of(argv, "-drive")[0].endswith("file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd")


def test_bios_needs_no_firmware_files():
    assert firmware_for(FirmwareSpec()) is None
    assert "-drive" not in argv_for(make_spec())


def test_a_vtpm_is_a_crb_device_on_the_swtpm_socket():
    argv = argv_for(make_spec(firmware=FirmwareSpec(vtpm=True)))
    assert "socket,id=tpm-chardev,path=/run/zq/i-7/swtpm.sock" in values_of(argv, "-chardev")
    assert values_of(argv, "-tpmdev") == ["emulator,id=tpm0,chardev=tpm-chardev"]
    assert devices(argv, "tpm-crb") == ["tpm-crb,tpmdev=tpm0"]


def test_direct_kernel_boot_puts_the_console_on_the_serial_port():
    spec = make_spec(
        kernel=Path("/img/vmlinuz"), initrd=Path("/img/initrd"), kernel_cmdline="quiet"
    )
    argv = argv_for(spec)
    assert values_of(argv, "-kernel") == ["/img/vmlinuz"]
    assert values_of(argv, "-initrd") == ["/img/initrd"]
    assert values_of(argv, "-append") == ["console=ttyS0 quiet"]


def test_a_kernel_command_line_with_its_own_console_is_kept_as_it_is():
    spec = make_spec(
        kernel=Path("/img/vmlinuz"), kernel_cmdline="console=tty0 console=ttyS0,115200"
    )
    assert values_of(argv_for(spec), "-append") == ["console=tty0 console=ttyS0,115200"]


def test_commas_in_option_values_are_doubled():
    argv = argv_for(make_spec(name="web, blue"))
    assert values_of(argv, "-name") == ["guest=web,, blue"]
