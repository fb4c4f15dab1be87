#!/bin/bash
# A newcomer's machine: a fresh, minimal Debian root (mmdebstrap, with
# make and git only), a fresh clone of this checkout's HEAD in it, and a
# command run there as root, the README's commands for example:
#
#   tests/cluster/fresh.sh trixie make demo
#   tests/cluster/fresh.sh trixie make check
#   tests/cluster/fresh.sh --clean     only the roots killed runs left
#
# Nothing of this machine's build or packages goes in: scripts/deps.sh
# installs everything inside, from the Debian registry.  The root is entered
# as tests/cluster/chroot.sh does, and removed afterwards (KEEP=1 keeps
# it, and says where).  A run killed before its end leaves its root (3 GB):
# the next run removes it, once its run is gone and nothing runs inside.
# Its output is the command's; its status too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
MIRROR=${DDP_RELEASE_MIRROR:-http://deb.debian.org/debian}
base=${DDP_FRESH_DIR:-/var/tmp}

die() { echo "fresh: $*" >&2; exit 1; }

# A process runs inside folder $1 (its root there): 0, else 1.
runs_inside() {
	local p r
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		case $r in "$1" | "$1"/*) return 0 ;; esac
	done
	return 1
}

# The roots of runs that were killed: a folder of this script's, over a
# minute old (a run starting writes its pid at once), not kept, whose run
# is gone and inside which nothing runs.  Its mounts were in the run's own
# mount namespace, gone with it: rm sees the folder alone.
clean_stale() {
	local old pid
	for old in "$base"/slurm-ddp-fresh.*; do
		[ -d "$old" ] && [ ! -e "$old/kept" ] || continue
		[ -n "$(find "$old" -maxdepth 0 -mmin +1)" ] || continue
		pid=$(cat "$old/pid" 2>/dev/null) || pid=
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then continue; fi
		! runs_inside "$old" || continue
		echo "fresh: removing $old, a root a killed run left" >&2
		rm -rf "$old"
	done
}

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, chroot, the test cluster)"
if [ "${1:-}" = --clean ]; then
	clean_stale
	exit 0
fi
[ "$#" -ge 2 ] || die "usage: fresh.sh SUITE CMD... (SUITE: bookworm, trixie or sid), or fresh.sh --clean"
suite=$1; shift
case $suite in bookworm|trixie|sid) ;; *) die "suite '$suite': expected bookworm, trixie or sid" ;; esac
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (scripts/deps.sh installs it)"

clean_stale
work=$(mktemp -d "$base/slurm-ddp-fresh.XXXXXX")
echo $$ >"$work/pid"
cleanup() {
	if [ -n "${KEEP:-}" ]; then
		touch "$work/kept"
		echo "fresh: kept $work/root" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
opts=()
[ "$suite" != sid ] || opts=(--aptopt='Acquire::Check-Valid-Until "false"')
t0=$SECONDS
mmdebstrap --quiet --variant=apt --include=make,git,ca-certificates "${opts[@]}" \
	"$suite" "$work/root" "$MIRROR" >&2 || die "mmdebstrap of $suite failed (above)"
[ "$suite" != sid ] || echo 'Acquire::Check-Valid-Until "false";' >"$work/root/etc/apt/apt.conf.d/99slurm-ddp"
git clone -q --no-local "$repo" "$work/root/root/slurm-ddp"
echo "fresh: a $suite root with make and git, and a clone of $(git -C "$repo" rev-parse --short HEAD), in $((SECONDS - t0)) s" >&2
"$here/chroot.sh" -C /root/slurm-ddp "$work/root" env HOME=/root "$@"
