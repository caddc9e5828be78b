#!/usr/bin/env bash
# check_fresh.sh - proves the README's two commands on a pristine Debian 12.
#
# A green CI run proves little about a new user's machine: CI runs where
# earlier work already installed packages. This script builds a minimal
# Debian 12 (bookworm) root with debootstrap, whatever the host has
# installed, copies a clean `git clone` of HEAD into it and, inside a chroot,
# does what the README asks of a newcomer:
#
#   1. installs the README's prerequisites (make; the clone is copied in),
#   2. `make test`, to the end,
#   3. `make serve` until /v2/health/ready answers 200, then SIGTERM to the
#      server, and checks that `make serve` exits 0.
#
# The root has no CUDA toolkit, so this also proves that the build and the
# tests work on a machine without nvcc. It prints one line per step with its
# time; logs are kept in the log directory it names. Mounts are undone and
# the root removed on every exit path (--keep keeps the root for a look).
#
# The site's network settings are the host's, as on any machine of the same
# site: the Debian archive's address is read from the host's apt sources
# (deb822 .sources or one-line .list), never written here; resolv.conf is
# bound in; and the host's local trust anchors (/usr/local/share/
# ca-certificates, which Debian's ca-certificates adds to the system store
# when setup.sh installs it) are copied in, with NODE_EXTRA_CA_CERTS naming
# that store, so that npm works behind a TLS-inspecting proxy too.
#
# Usage: scripts/check_fresh.sh [--keep] [--dir DIR] [--logs DIR]
#                               [--apt-cache DIR] [--ready-timeout SECONDS]
#   --dir DIR        where to build the root (default: a new folder in
#                    ${TMPDIR:-/var/tmp}); it must not exist or be empty
#   --logs DIR       where the logs go (default: <dir>.logs)
#   --apt-cache DIR  keep downloaded .deb files in DIR between runs (apt
#                    checks each against the archive's signed index, so the
#                    result is the same; only the download is saved)
#   --keep           keep the root afterwards (still unmounted)
#
# Needs root (debootstrap, mount, chroot): it re-runs itself with sudo when
# started as another user. Exit status: 0 when every step passed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
args=("$@")
keep=0
root=""    # set only once the script owns the folder: cleanup removes it
dir_arg=""
logs=""
apt_cache=""
ready_timeout=600
while (($#)); do
    case "$1" in
    --keep) keep=1 ;;
    --dir) dir_arg=$2; shift ;;
    --logs) logs=$2; shift ;;
    --apt-cache) apt_cache=$2; shift ;;
    --ready-timeout) ready_timeout=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_fresh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ "$(id -u)" -ne 0 ]; then
    exec sudo --preserve-env=NODE_EXTRA_CA_CERTS,TMPDIR -- "$0" "${args[@]}"
fi

t_start=$(date +%s)
step_start=$t_start
say() { echo "check_fresh: $*"; }
begin() {
    step_start=$(date +%s)
    printf 'check_fresh: %-52s ' "$1"
}
ok() { echo "ok ($(($(date +%s) - step_start)) s)"; }
die() {
    echo "FAILED ($(($(date +%s) - step_start)) s)"
    say "$1"
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        say "last lines of $2:"
        tail -n 40 "$2" | sed 's/^/    /'
    fi
    exit 1
}

# ---- the archive address, from the host's apt sources ----------------------
# Prints the URI of the first enabled `deb` entry of suite $1 with component
# main, from deb822 files and then one-line files.
archive_uri() {
    local suite=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$suite" '
            BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; comps = ""; enabled = "yes"
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^[ \t]*#/) continue
                    split(line, kv, ":")
                    key = tolower(kv[1]); val = substr(line, length(kv[1]) + 2)
                    gsub(/^[ \t]+|[ \t]+$/, "", val)
                    if (key == "types") types = val
                    else if (key == "uris") uris = val
                    else if (key == "suites") suites = val
                    else if (key == "components") comps = val
                    else if (key == "enabled") enabled = tolower(val)
                }
                if (enabled == "no" || (" " types " ") !~ / deb / || uris == "") next
                if ((" " suites " ") !~ (" " suite " ") || (" " comps " ") !~ / main /) next
                split(uris, u, /[ \t]+/); print u[1]; exit
            }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -e 's/\[[^]]*\]//' "$f" |
            awk -v suite="$suite" '$1 == "deb" && $3 == suite {
                for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }'
    done
}

# ---- cleanup on every exit path ----------------------------------------------
mounted_under() { awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts; }

# The mount points this script makes under the root, deepest first.
our_mounts() {
    printf '%s\n' "$root/var/cache/apt/archives" "$root/etc/resolv.conf" "$root/dev" \
        "$root/sys" "$root/proc"
}

cleanup() {
    local rc=$? pid m
    trap - EXIT INT TERM
    [ -n "$root" ] && [ -d "$root" ] || exit "$rc"
    # Processes whose root is the chroot: the server, or a test left behind.
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        if [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ]; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    sleep 0.2
    # Deepest mounts first (recursively for /dev's submounts); a lazy
    # unmount is the fallback for a busy one.
    mounted_under "$root" | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    for m in $(our_mounts); do
        if mountpoint -q "$m" 2>/dev/null; then
            umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        fi
    done
    local still=""
    for m in $(our_mounts); do
        mountpoint -q "$m" 2>/dev/null && still="$still $m"
    done
    if [ -n "$still" ] || [ -n "$(mounted_under "$root")" ]; then
        say "WARNING: still mounted under $root; not removing it:$still"
        mounted_under "$root" | sed 's/^/    /'
    elif ((keep)); then
        say "root kept in $root"
    else
        # --one-file-system: a safety net should anything be mounted after all.
        rm -rf --one-file-system "$root"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- host tools -----------------------------------------------------------------
begin "host tools (debootstrap, git)"
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v git >/dev/null || need+=(git)
if ((${#need[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" \
        >/dev/null || die "could not install ${need[*]} on the host"
fi
ok

mirror=$(archive_uri bookworm | head -n 1)
[ -n "$mirror" ] || { say "no 'deb' source for bookworm main in /etc/apt: cannot find the archive"; exit 1; }
updates=$(archive_uri bookworm-updates | head -n 1)
security=$(archive_uri bookworm-security | head -n 1)
head_rev=$(git -C "$repo" rev-parse --short=12 HEAD)
say "archive $mirror; HEAD $head_rev"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    say "note: uncommitted changes in $repo are not part of the check (it clones HEAD)"
fi

# Physical paths (no symlinks), as /proc/mounts and /proc/PID/root name
# them, and no white space, which /proc/mounts escapes.
if [ -z "$dir_arg" ]; then
    made=$(mktemp -d "${TMPDIR:-/var/tmp}/infd-fresh.XXXXXX")
else
    mkdir -p "$dir_arg"
    [ -z "$(ls -A "$dir_arg")" ] || { say "$dir_arg is not empty"; exit 2; }
    made=$dir_arg
fi
made=$(cd "$made" && pwd -P)
case "$made" in
*[[:space:]]*) say "'$made' has white space: give --dir another folder"; rmdir "$made"; exit 2 ;;
esac
root=$made # from here on, cleanup unmounts and removes it
logs=${logs:-$root.logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
say "root $root; logs $logs"

# ---- the root --------------------------------------------------------------------
begin "debootstrap --variant=minbase bookworm"
cache_opt=()
if [ -n "$apt_cache" ]; then
    mkdir -p "$apt_cache"
    apt_cache=$(cd "$apt_cache" && pwd)
    cache_opt=(--cache-dir="$apt_cache")
fi
debootstrap --variant=minbase "${cache_opt[@]}" bookworm "$root" "$mirror" \
    >"$logs/debootstrap.log" 2>&1 || die "debootstrap failed" "$logs/debootstrap.log"
ok

begin "apt sources, mounts, clone of HEAD"
{
    printf 'Types: deb\nURIs: %s\nSuites: bookworm%s\nComponents: main\n' "$mirror" \
        "$([ -n "$updates" ] && [ "$updates" = "$mirror" ] && echo " bookworm-updates")"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [ -n "$updates" ] && [ "$updates" != "$mirror" ]; then
        printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-updates\nComponents: main\n' "$updates"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
    if [ -n "$security" ]; then
        printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
} >"$root/etc/apt/sources.list.d/debian.sources"
rm -f "$root/etc/apt/sources.list"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
touch "$root/etc/resolv.conf"
mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
if [ -n "$apt_cache" ]; then
    mount --bind "$apt_cache" "$root/var/cache/apt/archives"
fi
if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
git clone -q --no-hardlinks "$repo" "$root/root/infd" >"$logs/clone.log" 2>&1 ||
    die "git clone failed" "$logs/clone.log"
ok

# Inside the chroot: a clean environment, as a login shell of root would
# have, plus NODE_EXTRA_CA_CERTS naming the root's own system bundle when the
# site has trust anchors of its own or sets that variable (see the top):
# Node.js reads its bundled CAs, not the system store, without it.
chroot_env=(HOME=/root TERM=dumb LANG=C.UTF-8
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] || ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    chroot_env+=("NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt")
fi
in_root() {
    env -i "${chroot_env[@]}" chroot "$root" /bin/bash -c "$1"
}

begin "prerequisites of the README (make)"
in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
         apt-get install -y -qq --no-install-recommends make' >"$logs/prereq.log" 2>&1 ||
    die "apt-get install make failed" "$logs/prereq.log"
ok

begin "make test"
in_root 'cd /root/infd && make test' >"$logs/make-test.log" 2>&1 ||
    die "make test failed" "$logs/make-test.log"
ok
grep -E "tests passed, [0-9]+ tests failed|^=+ .*(passed|failed).* in |^== all tests passed" \
    "$logs/make-test.log" | sed 's/^/    /' || true

# Free loopback ports for the server: nothing answers a connect to them now,
# and they lie below the kernel's ephemeral range, so that no outgoing
# connection of the host holds one (bind would fail with EADDRINUSE though a
# connect finds nothing listening: CI met this once, on gRPC's port).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ephemeral_low=32768
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
[ "$ephemeral_low" -gt 12000 ] 2>/dev/null || ephemeral_low=32768
picked=()
pick_port() { # sets $port; runs in this shell, so picked[] keeps every pick
    while :; do
        port=$((10000 + RANDOM % (ephemeral_low - 10000)))
        if port_free "$port" && [[ " ${picked[*]:-} " != *" $port "* ]]; then
            picked+=("$port")
            return
        fi
    done
}
pick_port
http_port=$port
pick_port
grpc_port=$port
pick_port
metrics_port=$port

# The children of process $1, from /proc (procps may not be on the host).
children_of() {
    local s line
    for s in /proc/[0-9]*/stat; do
        line=$(cat "$s" 2>/dev/null) || continue
        line=${line##*) } # after the command name: state, ppid, ...
        set -- "$1" $line
        if [ "$3" = "$1" ]; then
            s=${s#/proc/}
            echo "${s%/stat}"
        fi
    done
}

begin "make serve until /v2/health/ready is 200"
serve_args="--http-port $http_port --grpc-port $grpc_port --metrics-port $metrics_port"
# A simple command, so that $! is make's own pid: env, chroot and bash exec.
env -i "${chroot_env[@]}" chroot "$root" /bin/bash -c "cd /root/infd && exec make serve SERVE_ARGS='$serve_args'" \
    >"$logs/make-serve.log" 2>&1 &
make_pid=$!
code=000
deadline=$(($(date +%s) + ready_timeout))
while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$make_pid" 2>/dev/null || break
    code=$(in_root "curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
        http://127.0.0.1:$http_port/v2/health/ready" 2>/dev/null) || true
    [ "$code" = 200 ] && break
    sleep 1
done
if [ "$code" != 200 ]; then
    kill -0 "$make_pid" 2>/dev/null && kill -TERM "$make_pid" 2>/dev/null
    wait "$make_pid" 2>/dev/null || true
    die "ready answered '$code' (make serve ${serve_args})" "$logs/make-serve.log"
fi
ok

begin "SIGTERM to infd; make serve exits 0"
infd_pid=""
for pid in $(children_of "$make_pid"); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = infd ] && infd_pid=$pid
done
[ -n "$infd_pid" ] || die "no infd process under make serve (pid $make_pid)" "$logs/make-serve.log"
kill -TERM "$infd_pid"
rc=0
wait "$make_pid" || rc=$?
[ "$rc" -eq 0 ] || die "make serve exited $rc after SIGTERM" "$logs/make-serve.log"
ok

say "passed in $(($(date +%s) - t_start)) s (HEAD $head_rev, fresh Debian 12 root, no CUDA toolkit)"
