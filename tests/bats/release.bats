#!/usr/bin/env bats
# tests/cluster/release.sh: which Slurm releases it knows, and what it asks
# for a release no Debian suite ships (25.05, 25.11: SchedMD's tarball).
# Nothing here makes a root: every refusal comes before one is made.
# bats file_tags=release

load helpers

RELEASE="$REPO/tests/cluster/release.sh"

setup() {
	export DDP_RELEASE_CACHE="$BATS_TEST_TMPDIR/cache"
	unset DDP_SLURM_TARBALLS
}

# tarball NAME TOP: a tarball NAME whose one top folder is TOP
tarball() {
	mkdir -p "$BATS_TEST_TMPDIR/src/$2"
	echo "slurm" >"$BATS_TEST_TMPDIR/src/$2/META"
	tar -cjf "$BATS_TEST_TMPDIR/$1" -C "$BATS_TEST_TMPDIR/src" "$2"
	echo "$BATS_TEST_TMPDIR/$1"
}

@test "release.sh list: every release, the host's own, and those built from SchedMD's tarball" {
	run "$RELEASE" list
	assert_success
	local r
	for r in 22.05 24.11 25.05 25.11 26.05; do
		assert_line --regexp "^${r//./\\.} +[a-z]+ +"
	done
	assert_line --regexp "^25\.11 +trixie +built from SchedMD's tarball \(DDP_SLURM_TARBALLS\)"
	assert_line --regexp "^25\.05 +trixie +built from SchedMD's tarball"
	assert_line --regexp " this machine$"
}

@test "25.11 with no tarball named: refused, naming DDP_SLURM_TARBALLS and where SchedMD serves it; no root made" {
	run "$RELEASE" root 25.11
	assert_failure
	assert_output "release: Slurm 25.11: no Debian suite ships it; DDP_SLURM_TARBALLS must name SchedMD's tarball of it (slurm-25.11.N.tar.bz2 from https://download.schedmd.com/slurm/; it names: none)"
	[ ! -e "$DDP_RELEASE_CACHE" ]
}

@test "a tarball of another release: refused, naming the versions it found" {
	DDP_SLURM_TARBALLS="$(tarball slurm-25.05.8.tar.bz2 slurm-25.05.8) $(tarball slurm-26.05.3.tar.bz2 slurm-26.05.3)"
	export DDP_SLURM_TARBALLS
	run "$RELEASE" check 25.11
	assert_failure
	assert_output --partial "Slurm 25.11: no Debian suite ships it"
	assert_output --partial "it names: 25.05.8 26.05.3)"
	[ ! -e "$DDP_RELEASE_CACHE" ]
}

@test "a file that is not SchedMD's tarball, or none at all: refused, naming it" {
	local bad
	bad=$(tarball not-slurm.tar.bz2 src)
	DDP_SLURM_TARBALLS=$bad run "$RELEASE" root 25.05
	assert_failure
	assert_output "release: DDP_SLURM_TARBALLS: $bad: expected SchedMD's tarball, whose one top folder is slurm-X.Y.Z"
	echo "not a tarball" >"$BATS_TEST_TMPDIR/slurm-25.05.8.tar.bz2"
	DDP_SLURM_TARBALLS=$BATS_TEST_TMPDIR/slurm-25.05.8.tar.bz2 run "$RELEASE" root 25.05
	assert_failure
	assert_output --partial "expected SchedMD's tarball"
	DDP_SLURM_TARBALLS=$BATS_TEST_TMPDIR/gone.tar.bz2 run "$RELEASE" root 25.05
	assert_failure
	assert_output "release: DDP_SLURM_TARBALLS: $BATS_TEST_TMPDIR/gone.tar.bz2: no such file"
	[ ! -e "$DDP_RELEASE_CACHE" ]
}

@test "a release it does not know: refused, naming those it does" {
	run "$RELEASE" root 23.11
	assert_failure
	assert_output "release: Slurm release '23.11': expected 22.05, 24.11, 26.05, or 25.05 or 25.11 (from SchedMD's tarball)"
}

@test "make check's releases: 25.05 and 25.11 only where DDP_SLURM_TARBALLS names their tarballs" {
	run env DDP_RELEASES= DDP_SLURM_TARBALLS= bash -c "source <(sed -n '/^releases() {/,/^}/p' '$REPO/tests/run.sh'); releases"
	assert_success
	refute_output --partial 25.
	run env DDP_RELEASES= DDP_SLURM_TARBALLS="/x/slurm-25.11.7.tar.bz2 /y/slurm-25.05.8.tar.bz2 /z/slurm-24.11.5.tar.bz2" \
		bash -c "source <(sed -n '/^releases() {/,/^}/p' '$REPO/tests/run.sh'); releases"
	assert_success
	assert_line 25.11
	assert_line 25.05
	[ "$(grep -c '^24\.11$' <<<"$output")" -le 1 ]
}
