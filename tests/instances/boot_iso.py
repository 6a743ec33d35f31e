"""A bootable CD for tests: an El Torito boot sector that prints a line on the serial port and
halts. It is what an installer ISO is to the firmware, in 32 bytes of real-mode code."""

import io
from pathlib import Path

import pycdlib

COM1 = 0x3F8


def boot_sector(message: str) -> bytes:
    """xor ax,ax; mov ds,ax; cld; mov dx,COM1; mov si,msg; lodsb; test al,al; jz halt;
    out dx,al; jmp back; halt: hlt; jmp halt; msg: ..."""
    head = bytes([0x31, 0xC0, 0x8E, 0xD8, 0xFC, 0xBA, COM1 & 0xFF, COM1 >> 8])
    loop = bytes([0xAC, 0x84, 0xC0, 0x74, 0x03, 0xEE, 0xEB, 0xF8])  # lodsb ... jmp lodsb
    halt = bytes([0xF4, 0xEB, 0xFD])
    msg_offset = len(head) + 3 + len(loop) + len(halt)
    address = 0x7C00 + msg_offset
    code = head + bytes([0xBE, address & 0xFF, address >> 8]) + loop + halt
    code += message.encode() + b"\r\n\0"
    return code.ljust(2048, b"\0")


def write_boot_iso(path: Path, message: str) -> Path:
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3)
    sector = boot_sector(message)
    iso.add_fp(io.BytesIO(sector), len(sector), "/BOOT.BIN;1")
    iso.add_eltorito("/BOOT.BIN;1", bootcatfile="/BOOT.CAT;1", media_name="noemul",
                     boot_load_size=4)  # fmt: skip
    iso.write(str(path))
    iso.close()
    return path
