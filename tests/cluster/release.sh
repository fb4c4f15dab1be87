#!/bin/bash
# The Slurm releases slurm-ddp supports, each in a Debian root made with
# mmdebstrap from the Debian registry, so that one machine builds and tests
# against every release's own libslurm-dev and runs that release's daemons.
#
#   release.sh list             the releases: Slurm, Debian suite, and whether
#                               it is this machine's own
#   release.sh root REL         make REL's root if it is missing or stale; print
#                               its path
#   release.sh run REL CMD...   run CMD as root inside REL's root, in this
#                               checkout (at the same path), whose build/ there
#                               is build/release-REL here
#   release.sh check REL        in REL's root: the -Werror build, the unit tests
#                               and the Bats files that touch Slurm (RELEASE_BATS)
#
# REL is a Slurm release (22.05, 24.11, 26.05).  The host's own release
# runs on the host (run and check run there directly).
#
# A root is cached under DDP_RELEASE_CACHE (default /var/cache/slurm-ddp):
# one folder per suite and key, the key a hash of the suite, its
# mmdebstrap options and scripts/deps.sh (its package list), so a changed
# list makes a new root.  A root is remade when its key changes, when it is
# older than DDP_RELEASE_MAX_AGE days (7: Debian's security fixes, and
# unstable moves daily), or when it lacks the stamp its making writes last
# (an interrupted one).  Made in a temporary folder and renamed into place.
#
# Inside a root (tests/cluster/chroot.sh): the host's /proc, /sys, /dev and
# /run/netns, this checkout and /usr/local/cuda (where the host has it and
# the suite's compilers take it), in a mount namespace of the command's own,
# so that nothing stays mounted when it ends.  The test cluster (tests/cluster/cluster.sh) runs
# unchanged inside: its network namespaces and the `unreachable` route are
# the host's, its daemons the root's Slurm.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
CACHE=${DDP_RELEASE_CACHE:-/var/cache/slurm-ddp}
MAX_AGE=${DDP_RELEASE_MAX_AGE:-7}
MIRROR=${DDP_RELEASE_MIRROR:-http://deb.debian.org/debian}

die() { echo "release: $*" >&2; exit 1; }
log() { echo "release: $*" >&2; }

# The Bats files that touch Slurm, run on every release: the env contract,
# bad input, the configuration, the rendezvous under attack, binding,
# PyTorch, the examples and the packages.
RELEASE_BATS=(env bad_input config security bind pytorch examples package)

# suite REL: the Debian suite that ships Slurm REL
suite() {
	case $1 in
	22.05) echo bookworm ;;
	24.11) echo trixie ;;
	26.05) echo sid ;;
	*) die "Slurm release '$1': expected 22.05, 24.11 or 26.05" ;;
	esac
}

# Per-suite settings (mmdebstrap's options one a line).  sid's Release
# file on the mirror is past its Valid-Until; its glibc 2.43 declares C23's rsqrt, which CUDA 13.0's own
# math headers declare otherwise, so the GPU module is not built there.
mmdebstrap_opts() {
	case $1 in
	sid) echo '--aptopt=Acquire::Check-Valid-Until "false"' ;;
	esac
}
suite_cuda() { [ "$1" != sid ]; }

host_suite() { sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null; }

# The packages every root starts with; scripts/deps.sh, run inside, adds
# the rest (so that it is tried on every suite).
BASE_PKGS=ca-certificates,iproute2,procps,kmod

key() {
	{
		echo "$1"
		mmdebstrap_opts "$1"
		echo "$BASE_PKGS"
		cat "$repo/scripts/deps.sh"
	} | sha256sum | cut -c1-12
}

# root_fresh DIR: made whole, and not too old
root_fresh() {
	local stamp=$1/.slurm-ddp-root
	[ -f "$stamp" ] || return 1
	[ -z "$(find "$stamp" -mtime "+$((MAX_AGE - 1))" 2>/dev/null)" ]
}

make_root() {
	local s=$1 dir=$2 tmp opts=()
	command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (scripts/deps.sh installs it)"
	mkdir -p "$CACHE"
	tmp=$(mktemp -d "$CACHE/.making-$s.XXXXXX")
	# shellcheck disable=SC2064 # (this one's path, now)
	trap "rm -rf '$tmp'" EXIT
	log "making the $s root in $dir (mmdebstrap from $MIRROR, then scripts/deps.sh inside)"
	mapfile -t opts < <(mmdebstrap_opts "$s")
	local t0=$SECONDS
	mmdebstrap --quiet --variant=apt --include="$BASE_PKGS" "${opts[@]}" \
		"$s" "$tmp/root" "$MIRROR" >&2 || die "mmdebstrap of $s failed (above)"
	[ "$s" != sid ] || echo 'Acquire::Check-Valid-Until "false";' >"$tmp/root/etc/apt/apt.conf.d/99slurm-ddp"
	cp "$repo/scripts/deps.sh" "$tmp/root/tmp/deps.sh"
	chroot "$tmp/root" sh /tmp/deps.sh >&2 || die "scripts/deps.sh failed in the $s root (above)"
	chroot "$tmp/root" apt-get clean
	rm -f "$tmp/root/tmp/deps.sh"
	date -u +%FT%TZ >"$tmp/root/.slurm-ddp-root"
	rm -rf "$dir"
	mv "$tmp/root" "$dir"
	rmdir "$tmp"
	trap - EXIT
	log "the $s root is ready in $((SECONDS - t0)) s"
}

# root_of REL: the path of REL's root, made or remade first if need be
root_of() {
	local s dir old
	s=$(suite "$1")
	dir=$CACHE/root-$s-$(key "$s")
	if ! root_fresh "$dir"; then
		[ "$(id -u)" = 0 ] || die "making the $s root needs root"
		make_root "$s" "$dir"
		# other keys' roots of this suite are stale now
		for old in "$CACHE"/root-"$s"-*; do
			[ "$old" = "$dir" ] || rm -rf "$old"
		done
	fi
	echo "$dir"
}

is_host() { [ "$(suite "$1")" = "$(host_suite)" ]; }

# in_root REL CMD...: CMD inside REL's root (see the header)
in_root() {
	local rel=$1 r s cuda=() ld=()
	shift
	r=$(root_of "$rel")
	s=$(suite "$rel")
	mkdir -p "$repo/build/release-$rel"
	# CUDA as a site has it: its libraries in ld.so.conf (the packaged GPU
	# module has no RUNPATH)
	if suite_cuda "$s" && [ -d /usr/local/cuda/ ]; then
		cuda=(-r "$(readlink -f /usr/local/cuda):/usr/local/cuda")
		echo /usr/local/cuda/lib64 >"$r/etc/ld.so.conf.d/zz-slurm-ddp-cuda.conf"
		ld=(sh -c 'ldconfig && exec "$@"' sh)
	fi
	"$here/chroot.sh" -b "$repo:$repo" -b "$repo/build/release-$rel:$repo/build" "${cuda[@]}" -C "$repo" \
		"$r" "${ld[@]}" "$@"
}

cmd_list() {
	local rel mark
	printf '%-7s %-9s %s\n' Slurm Debian where
	for rel in 22.05 24.11 26.05; do
		mark="a root under $CACHE"
		is_host "$rel" && mark="this machine"
		printf '%-7s %-9s %s\n' "$rel" "$(suite "$rel")" "$mark"
	done
}

# check REL: what make check adds for each release other than the host's
cmd_check() {
	local rel=$1 files=() f
	for f in "${RELEASE_BATS[@]}"; do files+=("tests/bats/$f.bats"); done
	local script='
		set -u
		# (Debian'"'"'s slurm_version.h has the number alone: 0x180b05 is 24.11.5)
		v=$(sed -n "s/^#define SLURM_VERSION_NUMBER *0x\([0-9a-fA-F]*\).*/\1/p" /usr/include/slurm/slurm_version.h)
		v=$((16#${v:-0}))
		echo "# --- Slurm $((v >> 16)).$(printf %02d $((v >> 8 & 255))).$((v & 255)), Debian $(cat /etc/debian_version)"
		t0=$SECONDS
		if make -s -j"$(nproc)" WERROR=1 all bench >"$TMPDIR/build.log" 2>&1; then
			echo "ok - the -Werror build ($((SECONDS - t0)) s)"
		else
			tail -n 60 "$TMPDIR/build.log"
			echo "not ok - the -Werror build failed (above)"
			exit 1
		fi
		tests/run.sh unit || rc=1
		tests/run.sh bats "$@" || rc=1
		exit "${rc:-0}"'
	if is_host "$rel"; then
		TMPDIR=$(mktemp -d) bash -c "$script" sh "${files[@]}"
	else
		in_root "$rel" env TMPDIR=/tmp bash -c "$script" sh "${files[@]}"
	fi
}

case "${1:-}" in
list) cmd_list ;;
root)
	[ "$#" -eq 2 ] || die "root: expected a release, e.g. root 24.11"
	root_of "$2" ;;
run)
	[ "$#" -ge 3 ] || die "run: expected a release and a command, e.g. run 24.11 make"
	[ "$(id -u)" = 0 ] || die "run: needs root (chroot, mounts)"
	rel=$2; shift 2
	if is_host "$rel"; then exec "$@"; fi
	in_root "$rel" "$@" ;;
check)
	[ "$#" -eq 2 ] || die "check: expected a release, e.g. check 24.11"
	[ "$(id -u)" = 0 ] || die "check: needs root (chroot, mounts, the test cluster)"
	cmd_check "$2" ;;
*) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
