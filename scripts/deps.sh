#!/bin/sh
# Install the Debian packages slurm-ddp needs to build, test and demo.
# Idempotent: installs only what is missing.  Run as root on Debian 12
# (bookworm, Slurm 22.05), Debian 13 (trixie, Slurm 24.11) or Debian
# unstable (sid, Slurm 26.05).
#   scripts/deps.sh          build + test + demo dependencies
#   scripts/deps.sh --print  list the packages and exit
set -eu

PKGS="build-essential pkg-config iproute2 procps mount
libslurm-dev slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge
libhwloc-dev hwloc libyaml-dev zlib1g-dev libssl-dev nettle-dev
clang valgrind gdb shellcheck
libgloo-dev libdnnl-dev libopenblas-dev
bats bats-assert bats-support man-db groff-base
dpkg-dev debhelper lintian fakeroot mmdebstrap
libsystemd-dev dbus-daemon python3-dbus python3-gi
python3-torch python3-numpy dataset-fashion-mnist"

# package lists: none yet on a fresh image
have_lists() {
	[ -n "$(find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name lock ! -name partial -print -quit 2>/dev/null)" ]
}

# The sanitizers' and libFuzzer's runtime, and the OpenMP headers clang's
# static analyzer reads (make analyze), are clang's own major version's
# (libclang-rt-14-dev and libomp-14-dev on Debian 12, -19- on 13, -21- on
# unstable): the installed clang's, else the one the clang package would bring.
clang_pkgs() {
	v=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\)\..*/\1/p' | head -n 1)
	[ -n "$v" ] || v=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
	[ -n "$v" ] && echo "libclang-rt-$v-dev libomp-$v-dev"
}

if [ "$(id -u)" = 0 ] && ! have_lists; then
	apt-get update -qq
fi
cp=$(clang_pkgs) || { echo "deps: cannot tell clang's version (no clang installed, and apt-cache knows no package clang: run apt-get update)" >&2; exit 1; }
PKGS="$PKGS $cp"

if [ "${1:-}" = "--print" ]; then
	echo $PKGS
	exit 0
fi

missing=""
for p in $PKGS; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = "installed" ] || missing="$missing $p"
done

if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing" >&2
	echo "deps: run 'scripts/deps.sh' as root (or install them with apt-get)" >&2
	exit 1
fi

echo "deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Do not let package scripts start slurmd/slurmctld/munged on this machine:
# the test harness starts its own, in network namespaces.
guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	guard=1
fi
trap '[ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d' EXIT
# lists that do not know a missing package yet (stale): apt-get update first
if ! apt-cache show $missing >/dev/null 2>&1; then
	apt-get update -qq
fi
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
echo "deps: done"
