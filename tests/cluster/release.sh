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
# REL is a Slurm release (22.05, 24.11, 26.05, and 25.05 or 25.11 from
# SchedMD's tarball, below).  The host's own release runs on the host (run
# and check run there directly).
#
# Releases no Debian suite ships (25.05, 25.11) are built from SchedMD's
# tarball, as a site without Debian's packages builds them: DDP_SLURM_TARBALLS
# names the tarballs (slurm-25.11.N.tar.bz2 from download.schedmd.com, space
# separated), the one whose version is REL's is built in a copy of the
# trixie root from which Debian's Slurm is purged (configure --prefix=/usr
# --sysconfdir=/etc/slurm --enable-multiple-slurmd: the test cluster runs a
# slurmd per node on one machine).  Its root is keyed by the trixie root,
# the tarball's hash and the build (BUILD_SLURM), and remade with the trixie
# root.  Such a release runs every Bats file of a check but the Debian
# package's.
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
# a die() in $(...) ends the script too
shopt -s inherit_errexit

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

# suite REL: the Debian suite that ships Slurm REL, or whose root builds
# it from SchedMD's tarball
suite() {
	case $1 in
	22.05) echo bookworm ;;
	24.11 | 25.05 | 25.11) echo trixie ;;
	26.05) echo sid ;;
	*) die "Slurm release '$1': expected 22.05, 24.11, 26.05, or 25.05 or 25.11 (from SchedMD's tarball)" ;;
	esac
}

# from_source REL: REL is built from SchedMD's tarball
from_source() { [ "$1" = 25.05 ] || [ "$1" = 25.11 ]; }

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

# tarball_version FILE: the Slurm version in SchedMD's tarball FILE, from
# its one top folder (slurm-X.Y.Z)
tarball_version() {
	local top
	top=$(tar -tf "$1" 2>/dev/null | head -n 1 || true)
	top=${top%%/*}
	[[ "$top" =~ ^slurm-([0-9]+\.[0-9]+\.[0-9]+)$ ]] || return 1
	echo "${BASH_REMATCH[1]}"
}

# tarball_of REL: the tarball in DDP_SLURM_TARBALLS that holds REL
tarball_of() {
	local rel=$1 tb ver seen=""
	for tb in ${DDP_SLURM_TARBALLS:-}; do
		[ -f "$tb" ] || die "DDP_SLURM_TARBALLS: $tb: no such file"
		ver=$(tarball_version "$tb") ||
			die "DDP_SLURM_TARBALLS: $tb: expected SchedMD's tarball, whose one top folder is slurm-X.Y.Z"
		[ "${ver%.*}" = "$rel" ] && { echo "$tb"; return; }
		seen="$seen $ver"
	done
	die "Slurm $rel: no Debian suite ships it; DDP_SLURM_TARBALLS must name SchedMD's tarball of it (slurm-$rel.N.tar.bz2 from https://download.schedmd.com/slurm/; it names:${seen:- none})"
}

# What runs inside the copy of the trixie root, the tarball at
# /tmp/slurm.tar: Debian's Slurm out (and pinned out, so that no later
# apt-get mixes two), SchedMD's built and installed where Debian's was
# (its plugins under <libdir>/slurm, its slurm.pc for pkg-config).
# shellcheck disable=SC2016 # (expanded inside the root)
BUILD_SLURM='
set -eu
export DEBIAN_FRONTEND=noninteractive
ver=$1
apt-get purge -y -qq $(dpkg-query -W -f "\${Package}\n" | grep -E "^(lib)?slurm") >/dev/null
printf "Package: slurm* libslurm*\nPin: version *\nPin-Priority: -1\n" >/etc/apt/preferences.d/slurm-ddp-no-debian-slurm
apt-get install -y -qq --no-install-recommends bzip2 libmunge-dev libjson-c-dev libdbus-1-dev >/dev/null
cd /tmp
tar -xf slurm.tar
cd "slurm-$ver"
./configure -q --prefix=/usr --sysconfdir=/etc/slurm --libdir="/usr/lib/$(gcc -print-multiarch)" \
	--enable-pkgconfig --enable-multiple-slurmd --disable-dependency-tracking >/tmp/configure.log 2>&1 ||
	{ tail -n 40 /tmp/configure.log; exit 1; }
make -s -j"$(nproc)" >/tmp/make.log 2>&1 || { tail -n 60 /tmp/make.log; exit 1; }
make -s install >/tmp/install.log 2>&1 || { tail -n 40 /tmp/install.log; exit 1; }
ldconfig
cd /tmp
rm -rf "slurm-$ver" slurm.tar configure.log make.log install.log
apt-get clean
'

# make_source_root BASE DIR TARBALL VERSION: DIR, a copy of the trixie
# root BASE with Slurm VERSION built from TARBALL in place of Debian's
make_source_root() {
	local base=$1 dir=$2 tb=$3 ver=$4 tmp t0=$SECONDS
	tmp=$(mktemp -d "$CACHE/.making-slurm-$ver.XXXXXX")
	# shellcheck disable=SC2064 # (this one's path, now)
	trap "rm -rf '$tmp'" EXIT
	log "making the root of Slurm $ver in $dir (the trixie root, Debian's Slurm purged, $tb built in it)"
	cp -a "$base" "$tmp/root"
	rm -f "$tmp/root/.slurm-ddp-root"
	cp "$tb" "$tmp/root/tmp/slurm.tar"
	"$here/chroot.sh" "$tmp/root" bash -c "$BUILD_SLURM" sh "$ver" >&2 ||
		die "building Slurm $ver from $tb in the trixie root failed (above)"
	date -u +%FT%TZ >"$tmp/root/.slurm-ddp-root"
	rm -rf "$dir"
	mv "$tmp/root" "$dir"
	rmdir "$tmp"
	trap - EXIT
	log "the root of Slurm $ver is ready in $((SECONDS - t0)) s"
}

# source_root_of REL: the path of the root where REL runs, built from its
# tarball first if it is missing, or older than the trixie root it copies
source_root_of() {
	local rel=$1 tb ver base dir k old
	tb=$(tarball_of "$rel")
	ver=$(tarball_version "$tb")
	base=$(root_of 24.11)
	k=$({ basename "$base"; sha256sum <"$tb"; echo "$BUILD_SLURM"; } | sha256sum | cut -c1-12)
	dir=$CACHE/root-slurm-$ver-$k
	if ! root_fresh "$dir" || [ "$dir/.slurm-ddp-root" -ot "$base/.slurm-ddp-root" ]; then
		[ "$(id -u)" = 0 ] || die "making the root of Slurm $ver needs root"
		make_source_root "$base" "$dir" "$tb" "$ver"
		for old in "$CACHE"/root-slurm-"$rel".*-*; do
			[ "$old" = "$dir" ] || rm -rf "$old"
		done
	fi
	echo "$dir"
}

is_host() { ! from_source "$1" && [ "$(suite "$1")" = "$(host_suite)" ]; }

# in_root REL CMD...: CMD inside REL's root (see the header)
in_root() {
	local rel=$1 r s cuda=() ld=()
	shift
	if from_source "$rel"; then r=$(source_root_of "$rel"); else r=$(root_of "$rel"); fi
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
	for rel in 22.05 24.11 25.05 25.11 26.05; do
		mark="a root under $CACHE"
		is_host "$rel" && mark="this machine"
		from_source "$rel" && mark="built from SchedMD's tarball (DDP_SLURM_TARBALLS) in a root under $CACHE"
		printf '%-7s %-9s %s\n' "$rel" "$(suite "$rel")" "$mark"
	done
}

# check REL: what make check adds for each release other than the host's
cmd_check() {
	local rel=$1 files=() f
	for f in "${RELEASE_BATS[@]}"; do
		# the Debian package builds against Debian's libslurm-dev
		from_source "$rel" && [ "$f" = package ] && continue
		files+=("tests/bats/$f.bats")
	done
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
	if from_source "$2"; then source_root_of "$2"; else root_of "$2"; fi ;;
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
*) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
