#!/bin/sh
# nocloud.sh: apply a NoCloud seed to the ZopDay demo guest.
#
#   nocloud.sh apply SEEDDIR   SEEDDIR holds meta-data, user-data and,
#                              optionally, network-config (copied off the
#                              "cidata" ISO by /init)
#   nocloud.sh default         no seed: default hostname, links up, DHCP
#
# The guest is a busybox initramfs, so this is a small, plain-shell stand-in
# for cloud-init.  YAML is flattened by yaml.awk (see its header for the YAML
# subset).  Because the whole root file system lives in RAM, everything below
# is applied on every boot (cloud-init would do some of it once per
# instance); only /data survives a reboot.
#
# meta-data keys:    instance-id, local-hostname (or hostname)
#
# user-data: either a "#!" script (run like runcmd) or "#cloud-config" with:
#   hostname, fqdn           hostname; fqdn wins, like cloud-init
#   bootcmd, runcmd          list of strings (run with sh) or of argv lists;
#                            bootcmd runs once the network is up, runcmd last
#   users                    list of "default" (ignored) or maps with: name,
#                            gecos, homedir, shell, uid, groups (list or
#                            "a, b"), sudo (string or list; written to
#                            /etc/sudoers.d, there is no sudo binary),
#                            passwd / hashed_passwd (crypt hash; a value that
#                            is not a hash is taken as plain text),
#                            plain_text_passwd / password (plain text),
#                            lock_passwd (only an explicit true locks; unlike
#                            cloud-init the default is unlocked),
#                            ssh_authorized_keys (to ~/.ssh/authorized_keys)
#   chpasswd                 list: "user:pass" lines (a block string or a
#                            list), users: [{name, password, type:
#                            text|hash|RANDOM}]; "R"/"RANDOM" makes a random
#                            password and prints it on the console; expire
#                            is ignored
#   ssh_authorized_keys      top level: root's ~/.ssh/authorized_keys (there
#                            is no default user)
#   write_files              path, content, encoding (text, b64/base64,
#                            gz+b64/gzip+base64), permissions, owner, append,
#                            defer (written after users are created)
#   Other keys are reported on the console and ignored.  dropbear serves SSH
#   on port 22 with these keys and passwords.
#
# network-config: netplan version 2 (also wrapped in "network:"), section
#   ethernets.<id>: match.macaddress / match.name (glob; else <id> is the
#   interface name), set-name, macaddress, mtu, addresses (list of CIDRs),
#   gateway4, gateway6, routes [{to, via, metric}], nameservers {addresses,
#   search}, dhcp4 (busybox udhcpc in the background).  Links that are not
#   configured are brought up without addresses.  Without network-config
#   every link gets a background DHCP client that gives up after ~10 s, so
#   it never delays boot.

YAML_AWK=/usr/lib/zopday/yaml.awk
WORK=/run/zopday/nocloud
LOG=/var/log/cloud-init-output.log

log() { echo "zopday-demo: $*"; }

# ---- access to flattened YAML ("path<TAB>escaped value" lines) ----------

# yget FILE KEY: print the value of KEY exactly (no newline added);
# fails if KEY is absent.
yget() {
    awk -F '\t' -v k="$2" '
        $1 == k {
            found = 1; v = substr($0, length($1) + 2); o = ""
            for (i = 1; i <= length(v); i++) {
                c = substr(v, i, 1)
                if (c == "\\") { i++; c = substr(v, i, 1); if (c == "n") c = "\n" }
                o = o c
            }
            printf "%s", o
            exit
        }
        END { exit !found }' "$1"
}

# yhas FILE KEY: KEY is present, as a value or as a collection.
yhas() {
    awk -F '\t' -v k="$2" '$1 == k || index($1, k ".") == 1 { f = 1; exit } END { exit !f }' "$1"
}

# ykeys FILE PREFIX: the child keys of PREFIX (map keys or list indexes),
# in file order.
ykeys() {
    awk -F '\t' -v p="$2" '
        BEGIN { if (p != "") p = p "." }
        (p == "" || index($1, p) == 1) && length($1) > length(p) {
            r = substr($1, length(p) + 1); sub(/\..*/, "", r)
            if (!(r in seen)) { seen[r] = 1; print r }
        }' "$1"
}

# yvals FILE KEY: the values of a list of scalars, one per line; a single
# string counts as a list of one.
yvals() {
    if yget "$1" "$2" >/dev/null; then
        yget "$1" "$2"; echo
    else
        for i in $(ykeys "$1" "$2"); do yget "$1" "$2.$i"; echo; done
    fi
}

# ylist FILE KEY: like yvals, but a single string is split at commas
# ("a, b"), as cloud-init does for groups.
ylist() {
    if yget "$1" "$2" >/dev/null; then
        yget "$1" "$2" | tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep -v '^$'
    else
        for i in $(ykeys "$1" "$2"); do yget "$1" "$2.$i"; echo; done
    fi
}

istrue() { case "$1" in true|True|TRUE|yes|Yes|YES|on|On|ON|1) return 0;; esac; return 1; }
isfalse() { case "$1" in false|False|FALSE|no|No|NO|off|Off|OFF|0) return 0;; esac; return 1; }

# ---- hostname -----------------------------------------------------------

apply_hostname() {  # $1 = flat meta-data, $2 = flat user-data (may be empty files)
    fqdn=$(yget "$2" fqdn) || fqdn=""
    name=$(yget "$2" hostname) || name=$(yget "$1" local-hostname) || name=$(yget "$1" hostname) || name=""
    [ -n "$fqdn" ] || case "$name" in *.*) fqdn=$name;; esac
    [ -n "$fqdn" ] && name=${fqdn%%.*}
    [ -n "$name" ] || name=zopday-demo
    set_hostname "$name" "$fqdn"
}

set_hostname() {
    hostname "$1"
    echo "$1" >/etc/hostname
    {
        echo "127.0.0.1 localhost"
        if [ -n "$2" ]; then echo "127.0.1.1 $2 $1"; else echo "127.0.1.1 $1"; fi
        echo "::1 localhost ip6-localhost ip6-loopback"
    } >/etc/hosts
    log "hostname $1"
}

# ---- network ------------------------------------------------------------

links() {  # every interface but lo
    for p in /sys/class/net/*; do
        n=${p##*/}
        [ "$n" = lo ] || echo "$n"
    done
}

start_dhcp() {  # background, gives up after ~10 s without a lease
    mkdir -p /var/log
    udhcpc -f -n -i "$1" -t 5 -T 2 -s /usr/share/udhcpc/default.script \
        -x hostname:"$(hostname)" >"/var/log/udhcpc.$1.log" 2>&1 &
}

net_default() {
    ip link set lo up
    for n in $(links); do
        ip link set "$n" up
        start_dhcp "$n"
    done
    log "network: links up, DHCP in the background"
}

net_apply() {  # $1 = flat network-config
    nc=$1
    ip link set lo up
    pre=""
    yhas "$nc" network.version && pre=network.
    ver=$(yget "$nc" "${pre}version") || ver=""
    if [ "$ver" != 2 ]; then
        log "network-config: version '$ver' is not supported (only 2); using defaults"
        net_default
        return
    fi
    ns=""; search=""; done_links=" "
    for id in $(ykeys "$nc" "${pre}ethernets"); do
        b=${pre}ethernets.$id
        mac=$(yget "$nc" "$b.match.macaddress" | tr 'A-F' 'a-f') || mac=""
        pat=$(yget "$nc" "$b.match.name") || pat=""
        devs=""
        for n in $(links); do
            if [ -n "$mac" ]; then
                [ "$(cat "/sys/class/net/$n/address")" = "$mac" ] || continue
                [ -z "$pat" ] || case "$n" in $pat) ;; *) continue;; esac
            elif [ -n "$pat" ]; then
                case "$n" in $pat) ;; *) continue;; esac
            else
                [ "$n" = "$id" ] || continue
            fi
            devs="$devs $n"
        done
        if [ -z "$devs" ]; then
            log "network-config: no interface matches '$id'"
            continue
        fi
        for dev in $devs; do
            new=$(yget "$nc" "$b.set-name") || new=""
            if [ -n "$new" ] && [ "$new" != "$dev" ]; then
                ip link set dev "$dev" down
                ip link set dev "$dev" name "$new" && dev=$new
            fi
            v=$(yget "$nc" "$b.macaddress") && ip link set dev "$dev" address "$v"
            v=$(yget "$nc" "$b.mtu") && ip link set dev "$dev" mtu "$v"
            ip link set dev "$dev" up
            done_links="$done_links$dev "
            for a in $(yvals "$nc" "$b.addresses"); do
                ip addr add "$a" dev "$dev" && log "network: $dev $a"
            done
            v=$(yget "$nc" "$b.gateway4") && ip route add default via "$v" dev "$dev"
            v=$(yget "$nc" "$b.gateway6") && ip -6 route add default via "$v" dev "$dev"
            for r in $(ykeys "$nc" "$b.routes"); do
                to=$(yget "$nc" "$b.routes.$r.to") || to=default
                case "$to" in 0.0.0.0/0|::/0) to=default;; esac
                via=$(yget "$nc" "$b.routes.$r.via") || via=""
                metric=$(yget "$nc" "$b.routes.$r.metric") || metric=""
                fam=""; case "$to$via" in *:*) fam=-6;; esac
                ip $fam route add "$to" ${via:+via "$via"} dev "$dev" ${metric:+metric "$metric"} ||
                    log "network: route $to via $via failed"
            done
            for a in $(yvals "$nc" "$b.nameservers.addresses"); do ns="$ns $a"; done
            for a in $(yvals "$nc" "$b.nameservers.search"); do search="$search $a"; done
            v=$(yget "$nc" "$b.dhcp4") && istrue "$v" && start_dhcp "$dev"
        done
    done
    for n in $(links); do
        case "$done_links" in *" $n "*) ;; *) ip link set "$n" up;; esac
    done
    if [ -n "$ns" ]; then
        {
            echo "# static, from network-config"
            [ -z "$search" ] || echo "search$search"
            for a in $ns; do echo "nameserver $a"; done
        } >/etc/resolv.conf
    fi
}

# ---- users and passwords ------------------------------------------------

today() { echo $(( $(date +%s) / 86400 )); }

next_id() {  # first free id >= 1000 in /etc/passwd or /etc/group ($1)
    awk -F: 'BEGIN { n = 1000 } $3 >= n && $3 < 60000 { n = $3 + 1 } END { print n }' "$1"
}

ensure_group() {  # name [gid]
    grep -q "^$1:" /etc/group && return 0
    echo "$1:x:${2:-$(next_id /etc/group)}:" >>/etc/group
}

add_to_group() {  # group user
    ensure_group "$1"
    awk -F: -v OFS=: -v g="$1" -v u="$2" '
        $1 == g { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) { print; next }
                  $4 = ($4 == "" ? u : $4 "," u) }
        { print }' /etc/group >/etc/group.new && mv /etc/group.new /etc/group
}

create_user() {  # name uid gecos home shell
    if grep -q "^$1:" /etc/passwd; then return 0; fi
    uid=${2:-$(next_id /etc/passwd)}
    ensure_group "$1" "$uid"
    gid=$(awk -F: -v g="$1" '$1 == g { print $3 }' /etc/group)
    echo "$1:x:$uid:$gid:$3:$4:$5" >>/etc/passwd
    echo "$1:!:$(today):0:99999:7:::" >>/etc/shadow
    mkdir -p "$4"
    chown "$uid:$gid" "$4"
    chmod 755 "$4"
    log "user $1 (uid $uid)"
}

is_hash() { case "$1" in '$'[0-9a-z]'$'*|'$'[0-9a-z][0-9a-z]'$'*) return 0;; esac; return 1; }

set_password() {  # user password [hash|text]
    kind=$3
    [ -n "$kind" ] || if is_hash "$2"; then kind=hash; else kind=text; fi
    case "$2" in R|RANDOM)
        pw=$(tr -dc 'A-Za-z0-9' </dev/urandom | head -c 16)
        log "chpasswd: random password for $1: $pw"
        set -- "$1" "$pw"; kind=text;;
    esac
    if [ "$kind" = hash ]; then
        printf '%s:%s\n' "$1" "$2" | chpasswd -e
    else
        printf '%s:%s\n' "$1" "$2" | chpasswd
    fi
}

lock_password() {
    awk -F: -v OFS=: -v u="$1" '$1 == u && substr($2, 1, 1) != "!" { $2 = "!" $2 } { print }' \
        /etc/shadow >/etc/shadow.new && mv /etc/shadow.new /etc/shadow && chmod 640 /etc/shadow
}

add_keys() {  # user home, keys on stdin
    mkdir -p "$2/.ssh"
    touch "$2/.ssh/authorized_keys"
    while IFS= read -r k; do
        [ -n "$k" ] || continue
        grep -qxF "$k" "$2/.ssh/authorized_keys" || echo "$k" >>"$2/.ssh/authorized_keys"
    done
    chmod 700 "$2/.ssh"
    chmod 600 "$2/.ssh/authorized_keys"
    chown -R "$1:$(id -g "$1")" "$2/.ssh"
}

apply_users() {
    ud=$1
    for i in $(ykeys "$ud" users); do
        b=users.$i
        name=$(yget "$ud" "$b.name") || {
            v=$(yget "$ud" "$b") || v=""
            [ "$v" = default ] || log "users: entry $i has no name"
            continue
        }
        home=$(yget "$ud" "$b.homedir") || home=/home/$name
        shell=$(yget "$ud" "$b.shell") || shell=/bin/sh
        gecos=$(yget "$ud" "$b.gecos") || gecos=""
        uid=$(yget "$ud" "$b.uid") || uid=""
        create_user "$name" "$uid" "$gecos" "$home" "$shell"
        for g in $(ylist "$ud" "$b.groups"); do add_to_group "$g" "$name"; done
        rules=$(yvals "$ud" "$b.sudo")
        if [ -n "$rules" ] && ! istrue "$rules" && [ "$rules" != false ] && [ "$rules" != False ]; then
            mkdir -p /etc/sudoers.d
            echo "$rules" | while IFS= read -r r; do echo "$name $r"; done >>/etc/sudoers.d/90-cloud-init-users
            chmod 440 /etc/sudoers.d/90-cloud-init-users
            add_to_group sudo "$name"
        fi
        if v=$(yget "$ud" "$b.hashed_passwd") || v=$(yget "$ud" "$b.passwd"); then
            set_password "$name" "$v"
        elif v=$(yget "$ud" "$b.plain_text_passwd") || v=$(yget "$ud" "$b.password"); then
            set_password "$name" "$v" text
        fi
        v=$(yget "$ud" "$b.lock_passwd") && istrue "$v" && lock_password "$name"
        yvals "$ud" "$b.ssh_authorized_keys" | add_keys "$name" "$home"
    done
}

apply_chpasswd() {
    ud=$1
    if yhas "$ud" chpasswd.list; then
        if yget "$ud" chpasswd.list >/dev/null; then
            yget "$ud" chpasswd.list; echo
        else
            for i in $(ykeys "$ud" chpasswd.list); do yget "$ud" "chpasswd.list.$i"; echo; done
        fi | while IFS= read -r l; do
            l=$(echo "$l" | sed 's/^ *//; s/ *$//')
            [ -n "$l" ] || continue
            set_password "${l%%:*}" "${l#*:}"
        done
    fi
    for i in $(ykeys "$ud" chpasswd.users); do
        n=$(yget "$ud" "chpasswd.users.$i.name") || continue
        p=$(yget "$ud" "chpasswd.users.$i.password") || p=""
        t=$(yget "$ud" "chpasswd.users.$i.type") || t=""
        case "$t" in RANDOM) p=RANDOM; t="";; text) ;; hash) ;; *) t="";; esac
        [ -n "$p" ] && set_password "$n" "$p" "$t"
    done
}

# ---- write_files --------------------------------------------------------

write_files() {  # flat user-data, pass (now|defer)
    ud=$1
    for i in $(ykeys "$ud" write_files); do
        b=write_files.$i
        path=$(yget "$ud" "$b.path") || { log "write_files: entry $i has no path"; continue; }
        defer=no
        v=$(yget "$ud" "$b.defer") && istrue "$v" && defer=yes
        if [ "$2" = defer ]; then [ $defer = yes ] || continue; else [ $defer = no ] || continue; fi
        enc=$(yget "$ud" "$b.encoding") || enc=text
        mkdir -p "$(dirname "$path")"
        tmp=$WORK/write_file.tmp
        case "$enc" in
            b64|base64) yget "$ud" "$b.content" | base64 -d >"$tmp";;
            gz+b64|gzip+base64|gz+base64|gzip+b64) yget "$ud" "$b.content" | base64 -d | gunzip >"$tmp";;
            *) yget "$ud" "$b.content" >"$tmp";;
        esac
        v=$(yget "$ud" "$b.append") || v=false
        if istrue "$v"; then cat "$tmp" >>"$path"; rm -f "$tmp"; else mv "$tmp" "$path"; fi
        v=$(yget "$ud" "$b.permissions") || v=0644
        chmod "$v" "$path"
        v=$(yget "$ud" "$b.owner") || v=root:root
        chown "$v" "$path" || log "write_files: chown $v $path failed"
        log "wrote $path"
    done
}

# ---- bootcmd / runcmd ---------------------------------------------------

shquote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

make_script() {  # flat user-data, key, output file: one line per entry
    echo '#!/bin/sh' >"$3"
    for i in $(ykeys "$1" "$2"); do
        if yget "$1" "$2.$i" >/dev/null; then
            yget "$1" "$2.$i" >>"$3"
        else
            line=""
            for j in $(ykeys "$1" "$2.$i"); do
                line="$line $(shquote "$(yget "$1" "$2.$i.$j")")"
            done
            printf '%s' "${line# }" >>"$3"
        fi
        echo >>"$3"
    done
    chmod 755 "$3"
}

run_script() {  # name file: output to the console and to $LOG
    log "running $1"
    { sh "$2"; echo $? >"$WORK/$1.rc"; } 2>&1 | tee -a "$LOG"
    rc=$(cat "$WORK/$1.rc")
    [ "$rc" = 0 ] || log "$1 exited with status $rc"
}

# ---- SSH ----------------------------------------------------------------
# dropbear on port 22: password logins only when ssh_pwauth is not false, no
# root login unless disable_root is false (cloud-init's defaults).  Its host
# keys are made at the first connection (-R) and kept on the data disk when
# there is one, so they survive a reboot.
start_ssh() {  # flattened user-data
    opts="-R -E -p 22 -P /run/dropbear.pid"
    v=$(yget "$1" ssh_pwauth) || v=""
    isfalse "$v" && opts="$opts -s"
    v=$(yget "$1" disable_root) || v=true
    isfalse "$v" || opts="$opts -w"
    if grep -q ' /data ' /proc/mounts; then
        mkdir -p /data/.ssh-host-keys
        chmod 700 /data/.ssh-host-keys
        rm -rf /etc/dropbear
        ln -s /data/.ssh-host-keys /etc/dropbear
    else
        mkdir -p /etc/dropbear
    fi
    # shellcheck disable=SC2086
    dropbear $opts 2>>/var/log/dropbear.log || log "dropbear did not start"
}

# ---- main ---------------------------------------------------------------

KNOWN_KEYS=" hostname fqdn users chpasswd ssh_authorized_keys write_files runcmd bootcmd "
# ssh_pwauth and disable_root set dropbear's options; /etc/hosts is always written
KNOWN_KEYS="$KNOWN_KEYS manage_etc_hosts preserve_hostname ssh_pwauth disable_root "

apply() {
    seed=$1
    mkdir -p "$WORK" /var/log
    md=$WORK/meta-data.flat; ud=$WORK/user-data.flat; nc=$WORK/network-config.flat
    : >"$md"; : >"$ud"; : >"$nc"
    [ -f "$seed/meta-data" ] && awk -f "$YAML_AWK" "$seed/meta-data" >"$md"
    kind=none
    if [ -s "$seed/user-data" ]; then
        case "$(head -n 1 "$seed/user-data")" in
            '#cloud-config'*) kind=cloud-config; awk -f "$YAML_AWK" "$seed/user-data" >"$ud";;
            '#!'*) kind=script;;
            *) log "user-data: only #cloud-config and #! scripts are supported; ignored";;
        esac
    fi
    iid=$(yget "$md" instance-id) || iid=""
    echo "$iid" >/var/lib/zopday/instance-id
    log "seed: instance-id '$iid', user-data: $kind"

    apply_hostname "$md" "$ud"
    if [ -s "$seed/network-config" ]; then
        awk -f "$YAML_AWK" "$seed/network-config" >"$nc"
        net_apply "$nc"
    else
        net_default
    fi
    [ "$kind" = cloud-config ] || ud=/dev/null
    for k in $(ykeys "$ud" ""); do
        case "$KNOWN_KEYS" in *" $k "*) ;; *) log "cloud-config: '$k' is not supported; ignored";; esac
    done
    if yhas "$ud" bootcmd; then
        make_script "$ud" bootcmd "$WORK/bootcmd"
        run_script bootcmd "$WORK/bootcmd"
    fi
    write_files "$ud" now
    apply_users "$ud"
    apply_chpasswd "$ud"
    yvals "$ud" ssh_authorized_keys | add_keys root /root
    start_ssh "$ud"
    write_files "$ud" defer
    if yhas "$ud" runcmd; then
        make_script "$ud" runcmd "$WORK/runcmd"
        run_script runcmd "$WORK/runcmd"
    fi
    if [ "$kind" = script ]; then
        cp "$seed/user-data" "$WORK/user-script"
        chmod 755 "$WORK/user-script"
        run_script user-script "$WORK/user-script"
    fi
}

case "$1" in
    apply) apply "$2";;
    default) mkdir -p "$WORK"; set_hostname zopday-demo ""; net_default; start_ssh /dev/null;;
    *) echo "usage: $0 apply SEEDDIR | default" >&2; exit 2;;
esac
