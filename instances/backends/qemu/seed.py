"""The NoCloud seed ISO: volume label `cidata` with meta-data, user-data and network-config.

Plain ISO 9660 only allows 8.3 upper-case names; cloud-init (and the demo guest) read the Rock Ridge
or Joliet names, so both are written and the ISO names are just placeholders.
"""

import io
import os
from pathlib import Path

import pycdlib

from instances.backends.base import CloudInitSeed

VOLUME_LABEL = "cidata"


def write_seed_iso(seed: CloudInitSeed, path: Path) -> None:
    """Write the seed atomically: a running QEMU keeps reading the file it opened."""
    files = {"meta-data": seed.meta_data, "user-data": seed.user_data}
    if seed.network_config:
        files["network-config"] = seed.network_config
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL)
    for name, text in files.items():
        data = text.encode()
        iso_name = name.replace("-", "").upper()[:8] + ".;1"
        iso.add_fp(
            io.BytesIO(data), len(data), f"/{iso_name}", rr_name=name, joliet_path=f"/{name}"
        )
    tmp = path.with_name(f".{path.name}.tmp")
    iso.write(str(tmp))
    iso.close()
    os.replace(tmp, path)
