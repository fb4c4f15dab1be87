#!/bin/bash
# A newcomer's machine: a fresh, minimal Debian root (mmdebstrap, with
# make and git only), a fresh clone of this checkout's HEAD in it, and a
# command run there as root, the README's commands for example:
#
#   tests/cluster/fresh.sh trixie make demo
#   tests/cluster/fresh.sh trixie make check
#
# Nothing of this machine's build or packages goes in: scripts/deps.sh
# installs everything inside, from the Debian registry.  The root is entered
# as tests/cluster/chroot.sh does, and removed afterwards (KEEP=1 keeps
# it, and says where).  Its output is the command's; its status too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
MIRROR=${DDP_RELEASE_MIRROR:-http://deb.debian.org/debian}

die() { echo "fresh: $*" >&2; exit 1; }

[ "$#" -ge 2 ] || die "usage: fresh.sh SUITE CMD... (SUITE: bookworm, trixie or sid)"
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, chroot, the test cluster)"
suite=$1; shift
case $suite in bookworm|trixie|sid) ;; *) die "suite '$suite': expected bookworm, trixie or sid" ;; esac
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (scripts/deps.sh installs it)"

work=$(mktemp -d /var/tmp/slurm-ddp-fresh.XXXXXX)
cleanup() {
	if [ -n "${KEEP:-}" ]; then echo "fresh: kept $work/root" >&2; else rm -rf "$work"; fi
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
