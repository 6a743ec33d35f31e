#!/usr/bin/env bash
# Build the ZopDay demo guest: a Debian kernel plus a small busybox
# initramfs that runs the NoCloud seed, qemu-ga, an exec channel, an SSH
# server (dropbear) and a serial shell (see scripts/demo_guest/init).
#
# Usage: scripts/build_demo_image.sh [--force] [OUT]
#   OUT defaults to var/images/demo in the repository.  It receives
#     vmlinuz          Debian's cloud kernel (linux-image-*-cloud-amd64):
#                      LZ4-compressed, so it boots fast under TCG (~4 s to a
#                      shell), but it has no e1000/e1000e and no AHCI driver.
#     vmlinuz-generic  Debian's generic kernel (linux-image-*-amd64): also
#                      drives e1000/e1000e NICs and SATA (AHCI) disks and
#                      CD-ROMs, e.g. a seed ISO given as -cdrom on q35; its
#                      XZ decompression makes it ~6 s slower under TCG.
#     initrd.img       gzip'd newc cpio, one for both kernels (it carries the
#                      modules of each)
#     VERSION          first line: the build stamp; then package versions
#   --force rebuilds even when OUT is up to date.
# Environment:
#   ZOPDAY_KERNEL_FLAVOUR  flavour of vmlinuz (default cloud-amd64)
#   ZOPDAY_GENERIC_KERNEL  0: skip vmlinuz-generic (saves a 70 MB download)
#   ZOPDAY_KEEP_WORK=1     keep the temporary work directory (for debugging).
#   SOURCE_DATE_EPOCH      timestamp for the files in the initramfs.
#
# Needs a Debian (amd64) host with apt package lists ("apt-get update"):
# the packages are fetched with `apt-get download` and unpacked with
# `dpkg -x`; nothing gets installed.  Root is not needed.
set -euo pipefail
# The guest's files keep the usual modes whatever umask the caller (bin/zop: 077) has.
umask 022

# Bump when the image changes in a way the file hash below does not see.
IMAGE_VERSION=1

FLAVOUR=${ZOPDAY_KERNEL_FLAVOUR:-cloud-amd64}
GENERIC=${ZOPDAY_GENERIC_KERNEL:-1}
# vmlinuz first, then vmlinuz-generic (unless the main one is generic already)
FLAVOURS=("$FLAVOUR")
if [ "$GENERIC" != 0 ] && [ "$FLAVOUR" != amd64 ]; then FLAVOURS+=(amd64); fi
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$SCRIPT_DIR")
GUEST_DIR=$SCRIPT_DIR/demo_guest
EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

# Modules the guest loads, in this order (modprobe adds the dependencies
# from modules.dep).  Names missing from the kernel are skipped with a note.
MODULES=(
    virtio_pci virtio_blk virtio_scsi virtio_net virtio_console virtio_balloon virtio_rng
    e1000 e1000e
    sd_mod sr_mod ahci ata_piix
    isofs ext4 crc32c_generic
    evdev button
    tpm_crb tpm_tis
    pvpanic_mmio
)

say() { printf '[build_demo_image] %s\n' "$*"; }
die() { printf '[build_demo_image] ERROR: %s\n' "$*" >&2; exit 1; }

FORCE=0
OUT=""
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $arg (try --help)" ;;
        *) [ -z "$OUT" ] || die "only one OUT directory, please"; OUT=$arg ;;
    esac
done
OUT=${OUT:-$REPO_DIR/var/images/demo}

# ---- tools --------------------------------------------------------------
missing=()
for t in apt-get apt-cache dpkg dpkg-deb cpio gzip find sort sha256sum awk sed mktemp od; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
    die "missing tools: ${missing[*]} (on Debian: apt-get install apt dpkg cpio gzip findutils coreutils gawk sed)"
fi

# The stamp names everything the image is made of, so VERSION tells whether
# OUT is current without downloading anything.
guest_hash() {
    (
        cd "$SCRIPT_DIR"
        { echo build_demo_image.sh; echo demo_guest/init; find demo_guest/rootfs -type f; } |
            LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done
    ) | sha256sum | cut -c1-16
}
STAMP="zopday-demo-image $IMAGE_VERSION kernels=$(IFS=,; echo "${FLAVOURS[*]}") files=$(guest_hash)"

kernel_file() { if [ "$1" = 0 ]; then echo vmlinuz; else echo vmlinuz-generic; fi; }
outputs_exist() {
    [ -s "$OUT/initrd.img" ] || return 1
    for i in "${!FLAVOURS[@]}"; do [ -s "$OUT/$(kernel_file "$i")" ] || return 1; done
}
if [ $FORCE = 0 ] && outputs_exist &&
    [ "$(head -n 1 "$OUT/VERSION" 2>/dev/null)" = "$STAMP" ]; then
    say "$OUT is up to date ($STAMP)"
    exit 0
fi

[ "$(dpkg --print-architecture)" = amd64 ] || die "this builds an amd64 guest on an amd64 Debian host"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zopday-demo.XXXXXX")
cleanup() { if [ "${ZOPDAY_KEEP_WORK:-0}" = 1 ]; then say "work directory kept: $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
say "building $STAMP"
say "work directory $WORK"

# ---- which packages -----------------------------------------------------
KPKGS=()
for f in "${FLAVOURS[@]}"; do
    p=$(apt-cache depends "linux-image-$f" 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
    [ -n "$p" ] || die "cannot resolve linux-image-$f to a kernel package: run 'apt-get update' first (needs Debian's package lists)"
    KPKGS+=("$p")
done
say "kernel packages ${KPKGS[*]}"

# qemu-ga's and dropbear's shared libraries: take the closure of their lib*
# dependencies (libc6, libglib2.0-0, zlib1g, ...); only the files it really links are copied later.
deps_of() {
    apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "$@" 2>/dev/null |
        awk '$1 ~ /^\|?(Pre)?Depends:$/ && ($2 ~ /^lib/ || $2 == "zlib1g") && $2 !~ /-(perl|dev)$/ { print $2 }' |
        sort -u
}
LIBPKGS=$(deps_of qemu-guest-agent dropbear-bin)
while :; do
    more=$( { echo "$LIBPKGS"; deps_of $LIBPKGS; } | sort -u)
    [ "$more" = "$LIBPKGS" ] && break
    LIBPKGS=$more
done
[ -n "$LIBPKGS" ] || die "cannot resolve qemu-guest-agent's dependencies: run 'apt-get update' first"

# ---- download and unpack ------------------------------------------------
mkdir -p "$WORK/debs"
# apt drops privileges to _apt for downloads when run as root: let it write.
chmod 755 "$WORK"; chmod 777 "$WORK/debs"
say "downloading ${KPKGS[*]} busybox-static qemu-guest-agent dropbear-bin and $(echo $LIBPKGS | wc -w) library packages"
(cd "$WORK/debs" && apt-get download -q "${KPKGS[@]}" busybox-static qemu-guest-agent dropbear-bin $LIBPKGS) >"$WORK/download.log" 2>&1 ||
    { cat "$WORK/download.log" >&2; die "apt-get download failed (see above)"; }
ls "$WORK"/debs/*.deb >/dev/null 2>&1 || die "apt-get download fetched nothing"

say "unpacking"
PROOT=$WORK/pkgs       # busybox, qemu-ga and the libraries
for deb in "$WORK"/debs/*.deb; do
    case "${deb##*/}" in
        linux-image-*) ;;     # one tree per kernel, below
        *) dpkg -x "$deb" "$PROOT" ;;
    esac
done
pkgver() { dpkg-deb -f "$(ls "$WORK"/debs/"$1"_*.deb | head -n 1)" Version; }

ROOT=$WORK/root
BB=$PROOT/bin/busybox
[ -x "$BB" ] || die "busybox-static did not provide /bin/busybox"

# ---- root file system ---------------------------------------------------
say "assembling the root file system"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,tmp,root,home,data,mnt,var/lib/zopday,var/log,lib/x86_64-linux-gnu,usr/lib/x86_64-linux-gnu,lib64}
chmod 1777 "$ROOT/tmp"
chmod 700 "$ROOT/root"
ln -s ../run "$ROOT/var/run"

install -m 755 "$BB" "$ROOT/bin/busybox"
# one link per applet, where Debian's busybox puts it
"$BB" --list-full | while read -r app; do
    [ "$app" = bin/busybox ] && continue
    [ -e "$ROOT/$app" ] || [ -L "$ROOT/$app" ] || ln -s /bin/busybox "$ROOT/$app"
done

install -m 755 "$GUEST_DIR/init" "$ROOT/init"
cp -a "$GUEST_DIR/rootfs/." "$ROOT/"
# git keeps only the x bit: set the modes that matter explicitly
chmod 755 "$ROOT/usr/lib/zopday/nocloud.sh" "$ROOT/usr/lib/zopday/shutdown" "$ROOT/sbin/shutdown" \
    "$ROOT/usr/sbin/chpasswd" "$ROOT/usr/share/udhcpc/default.script" "$ROOT/etc/acpi/PWRF/00000080"
chmod 640 "$ROOT/etc/shadow"
chmod 644 "$ROOT/etc/passwd" "$ROOT/etc/group" "$ROOT/etc/profile"
[ ! -e "$ROOT/etc/acpid.conf" ] || die "etc/acpid.conf must not exist (it disables the power button)"

# qemu-ga and dropbear, and exactly the libraries they link, resolved by the
# packaged dynamic loader inside the unpacked tree (never the host's libraries).
LDSO=$PROOT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -f "$LDSO" ] || LDSO=$PROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -f "$LDSO" ] || die "libc6 did not provide ld-linux-x86-64.so.2"
LIBPATH=$PROOT/lib/x86_64-linux-gnu:$PROOT/usr/lib/x86_64-linux-gnu
install_linked() {  # path of a binary in the unpacked tree, relative to it
    local bin=$1 name=${1##*/} line lib rel
    install -m 755 "$PROOT/$bin" "$ROOT/$bin"
    "$LDSO" --inhibit-cache --library-path "$LIBPATH" --list "$PROOT/$bin" >"$WORK/ldd-$name.txt" ||
        die "cannot list $name's libraries"
    while read -r line; do
        case "$line" in *"not found"*) die "$name needs a library that no downloaded package has: $line" ;; esac
        lib=$(echo "$line" | awk '$2 == "=>" { print $3 }')
        [ -n "$lib" ] || continue
        case "$lib" in "$PROOT"/*) ;; *) die "$name's $lib is not in the downloaded packages (add its package)";; esac
        rel=${lib#"$PROOT"/}
        mkdir -p "$ROOT/$(dirname "$rel")"
        cp -L "$lib" "$ROOT/$rel"
    done <"$WORK/ldd-$name.txt"
}
install_linked usr/sbin/qemu-ga
install_linked usr/sbin/dropbear
cp -L "$LDSO" "$ROOT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
ln -sf /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ROOT/lib64/ld-linux-x86-64.so.2"
# prove the copy is complete: both run from the new tree alone
in_tree() {
    "$ROOT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --inhibit-cache \
        --library-path "$ROOT/lib/x86_64-linux-gnu:$ROOT/usr/lib/x86_64-linux-gnu" "$@"
}
in_tree "$ROOT/usr/sbin/qemu-ga" --version >"$WORK/qga-version.txt" 2>&1 ||
    { cat "$WORK/qga-version.txt" >&2; die "qemu-ga does not run from the assembled tree"; }
in_tree "$ROOT/usr/sbin/dropbear" -V >"$WORK/dropbear-version.txt" 2>&1 ||
    { cat "$WORK/dropbear-version.txt" >&2; die "dropbear does not run from the assembled tree"; }
say "$(head -n 1 "$WORK/qga-version.txt") with $(grep -c '=>' "$WORK/ldd-qemu-ga.txt") libraries; $(head -n 1 "$WORK/dropbear-version.txt")"

# ---- kernels and their modules ------------------------------------------
# A kernel package has no modules.dep (depmod runs at install time): make
# one, take the wanted modules plus their dependencies, then make the
# guest's own modules.dep for busybox modprobe.  The list of modules that
# /init loads is kept per kernel: /lib/modules/VERSION/zopday.modules.
add_kernel() {  # package, output file name
    local kpkg=$1 kver=${1#linux-image-} kroot=$WORK/kernel-${1#linux-image-}
    dpkg -x "$(ls "$WORK"/debs/"$kpkg"_*.deb | head -n 1)" "$kroot"
    [ -f "$kroot/boot/vmlinuz-$kver" ] || die "$kpkg has no /boot/vmlinuz-$kver"
    local kmods=$kroot/lib/modules/$kver
    [ -d "$kmods" ] || kmods=$kroot/usr/lib/modules/$kver
    [ -d "$kmods" ] || die "$kpkg has no modules directory"
    "$BB" depmod -b "$kroot" "$kver" || die "depmod on $kpkg failed"
    local dep=$kmods/modules.dep gmods=$ROOT/lib/modules/$kver m m_ path want=()
    mkdir -p "$gmods"
    : >"$gmods/zopday.modules"
    for m in "${MODULES[@]}"; do
        m_=${m//-/_}
        path=$(awk -F: -v m="$m_" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/-/, "_", n) } n == m { print $1; exit }' "$dep")
        if [ -n "$path" ]; then
            want+=("$path")
            echo "$m" >>"$gmods/zopday.modules"
        elif grep -q "/${m_//_/[-_]}\.ko" "$kmods/modules.builtin" 2>/dev/null; then
            : # built into the kernel
        else
            say "note: $kpkg has no module $m (its guests go without it)"
        fi
    done
    # closure over modules.dep (paths there are relative to $kmods)
    awk -F': *' '
        NR == FNR { dep[$1] = $2; next }
        { todo[$0] = 1 }
        END {
            do {
                more = 0
                for (m in todo) if (!(m in done)) {
                    done[m] = 1; print m
                    n = split(dep[m], d, " ")
                    for (i = 1; i <= n; i++) if (!(d[i] in done)) { todo[d[i]] = 1; more = 1 }
                }
            } while (more)
        }' "$dep" <(printf '%s\n' "${want[@]}") | sort -u >"$WORK/modules-$kver.txt"
    local p rel
    while read -r p; do
        rel=${p#"$kmods"/}; rel=${rel#/lib/modules/$kver/}
        mkdir -p "$gmods/$(dirname "$rel")"
        cp "$kmods/$rel" "$gmods/$rel"
    done <"$WORK/modules-$kver.txt"
    cp "$kmods/modules.builtin" "$kmods/modules.order" "$gmods/" 2>/dev/null || true
    "$BB" depmod -b "$ROOT" "$kver" || die "depmod on the guest modules of $kver failed"
    cp "$kroot/boot/vmlinuz-$kver" "$WORK/$2"
    say "$2: $kver, $(wc -l <"$WORK/modules-$kver.txt") modules ($(du -sh "$gmods" | cut -f1))"
    echo "$2=$kver ($kpkg $(pkgver "$kpkg"))" >>"$WORK/kernels.txt"
    rm -rf "$kroot"
}
: >"$WORK/kernels.txt"
for i in "${!KPKGS[@]}"; do
    add_kernel "${KPKGS[$i]}" "$(kernel_file "$i")"
done

# ---- identity -----------------------------------------------------------
{
    echo "$STAMP"
    cat "$WORK/kernels.txt"
    echo "busybox-static=$(pkgver busybox-static)"
    echo "qemu-guest-agent=$(pkgver qemu-guest-agent)"
    echo "dropbear-bin=$(pkgver dropbear-bin)"
} >"$WORK/VERSION"
cp "$WORK/VERSION" "$ROOT/etc/zopday-demo-version"
cat >"$ROOT/etc/os-release" <<EOF
PRETTY_NAME="ZopDay demo guest"
NAME="ZopDay demo"
ID=zopday-demo
ID_LIKE=debian
VERSION_ID="$IMAGE_VERSION"
VERSION="$IMAGE_VERSION"
EOF
echo zopday-demo >"$ROOT/etc/hostname"

# The kernel opens /dev/console before /init runs; without root rights the
# node cannot be made, and /init reopens the console from devtmpfs instead.
if [ "$(id -u)" = 0 ]; then mknod -m 600 "$ROOT/dev/console" c 5 1; fi

# ---- pack ---------------------------------------------------------------
say "packing the initramfs"
find "$ROOT" -exec touch -h -d "@$EPOCH" {} +
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet) |
    gzip -9n >"$WORK/initrd.img"
# Each file is replaced by a rename, so a QEMU that is starting meanwhile
# reads either the old or the new file, never half of one.
mkdir -p "$OUT"
rm -f "$OUT/VERSION" "$OUT/vmlinuz-generic"
for f in initrd.img $(for i in "${!KPKGS[@]}"; do kernel_file "$i"; done); do
    cp "$WORK/$f" "$OUT/.$f.tmp.$$"
    mv "$OUT/.$f.tmp.$$" "$OUT/$f"
done
# VERSION last: a build that stopped half-way is never taken as current
cp "$WORK/VERSION" "$OUT/VERSION"
say "done: $(cd "$OUT" && du -h vmlinuz* initrd.img | awk '{ printf "%s%s (%s)", sep, $2, $1; sep = ", " }')"
sed 's/^/[build_demo_image]   /' "$OUT/VERSION"
