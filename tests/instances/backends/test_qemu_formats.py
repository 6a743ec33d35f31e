"""Image formats read from a file's header in Python, as QEMU's probes would, so that qemu-img
never opens a file users gave without being told its format. Decoy files only."""

import struct
import subprocess
from pathlib import Path

import pytest

from instances.backends.base import BackendError
from instances.backends.qemu.formats import detect_format, qcow2_dependency, read_ends
from instances.backends.qemu.images import QemuImg
from tests.instances.image_files import fifo_decoy, iso, polyglot, qcow2, vmdk_descriptor

HEADERS = {
    "qcow": b"QFI\xfb\0\0\0\1",
    "qcow2": b"QFI\xfb\0\0\0\3",
    "qed": b"QED\0",
    "vmdk": b"KDMV\1\0\0\0",
    "vdi": b"<<< Oracle VM VirtualBox Disk Image >>>\n".ljust(64, b"\0")
    + struct.pack("<I", 0xBEDA107F),
    "vhdx": b"vhdxfile",
    "vpc": b"conectix",
    "luks": b"LUKS\xba\xbe\0\1",
    "parallels": b"WithoutFreeSpace\2\0\0\0",
    "bochs": b"Bochs Virtual HD Image\0",
    "cloop": b"#!/bin/sh\n#V2.0 Format\nmodprobe cloop file=$0 && mount -r -t iso9660 "
    b"/dev/cloop $1\n",
}


def logged_qemu_img(folder: Path) -> tuple[Path, Path]:
    """A qemu-img that writes its arguments to a log first."""
    log = folder / "argv.log"
    wrapper = folder / "qemu-img"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec qemu-img "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_each_format_qemu_probes_is_told_by_its_header(name):
    assert detect_format(HEADERS[name].ljust(512, b"\0")) == name


@pytest.mark.parametrize(
    "text",
    [b"# Disk DescriptorFile\nversion=1\n", b"# made by hand\n  \r\nversion=3\r\nCID=1\n"],
)
def test_a_vmdk_text_descriptor_is_told_with_or_without_its_heading(text):
    assert detect_format(text) == "vmdk"


def test_a_dmg_is_told_by_its_trailer_and_a_plain_file_is_raw():
    assert detect_format(b"\0" * 512, b"koly" + b"\0" * 508) == "dmg"
    assert detect_format(b"<html>version=1</html>\n") == "raw"
    assert detect_format(b"") == "raw"


def test_an_iso_is_raw_and_one_that_is_also_a_qcow2_is_a_qcow2(tmp_path):
    assert detect_format(*read_ends(iso(tmp_path))) == "raw"
    assert detect_format(*read_ends(polyglot(tmp_path))) == "qcow2"


def test_a_qcow2_header_says_which_other_file_it_names(tmp_path):
    data = tmp_path / "external.qcow2"
    options = f"data_file={tmp_path / 'data.raw'}"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", options, str(data), "64K"],
                   check=True)  # fmt: skip
    backed = qcow2(tmp_path, "backed.qcow2", "1M", backing=tmp_path / "data.raw")
    assert qcow2_dependency(read_ends(qcow2(tmp_path, "plain.qcow2", "1M"))[0]) == ""
    assert qcow2_dependency(read_ends(backed)[0]) == "a backing file"
    assert qcow2_dependency(read_ends(data)[0]) == "an external data file"


def test_a_vmdk_naming_a_host_file_is_probed_without_qemu_img_opening_it(tmp_path):
    wrapper, log = logged_qemu_img(tmp_path)
    decoy = fifo_decoy(tmp_path)  # an open of it would wait for a writer that never comes
    info = QemuImg(str(wrapper)).probe(vmdk_descriptor(tmp_path, decoy))
    assert info["format"] == "vmdk"
    assert not log.exists()  # qemu-img was never run on it


def test_a_qcow2_naming_a_data_file_is_refused_before_qemu_img_reads_it(tmp_path):
    wrapper, log = logged_qemu_img(tmp_path)
    image = tmp_path / "external.qcow2"
    options = f"data_file={tmp_path / 'data.raw'}"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", options, str(image), "64K"],
                   check=True)  # fmt: skip
    with pytest.raises(BackendError, match="it names an external data file"):
        QemuImg(str(wrapper)).require_standalone(image, "qcow2")
    assert not log.exists()


def test_a_fifo_given_as_an_image_is_refused_without_waiting_on_it(tmp_path: Path):
    with pytest.raises(BackendError, match="decoy-fifo is not a regular file"):
        QemuImg().probe(fifo_decoy(tmp_path))
