#!/usr/bin/env bats
# tests/cluster/fresh.sh --clean: the roots of runs killed before their end
# (3 GB each) go; a live run's, a kept one, one just made and one a process
# runs in stay.  Fake roots in a folder of the test's: nothing is built.
# bats file_tags=release

load helpers

FRESH="$REPO/tests/cluster/fresh.sh"

setup() {
	[ "$(id -u)" = 0 ] || skip "fresh.sh runs as root"
	export DDP_FRESH_DIR="$BATS_TEST_TMPDIR/var"
	mkdir -p "$DDP_FRESH_DIR"
	INSIDE=''
}

teardown() {
	[ -z "$INSIDE" ] || kill "$INSIDE" 2>/dev/null || true
}

# run_dir NAME AGE [PID]: a run's folder with a root in it, AGE old, its run PID
run_dir() {
	local d=$DDP_FRESH_DIR/slurm-ddp-fresh.$1
	mkdir -p "$d/root/etc"
	[ -z "${3:-}" ] || echo "$3" >"$d/pid"
	touch -d "$2" "$d"
}

@test "fresh.sh --clean: a killed run's root goes; a live run's, a kept one, a new one and one a process runs in stay" {
	local gone lib
	sh -c 'exit 0' &
	gone=$!
	wait "$gone"
	run_dir killed '10 minutes ago' "$gone"
	run_dir nopid '10 minutes ago'
	run_dir live '10 minutes ago' "$$"
	mkdir -p "$DDP_FRESH_DIR/slurm-ddp-fresh.kept"
	touch "$DDP_FRESH_DIR/slurm-ddp-fresh.kept/kept"
	run_dir kept '10 minutes ago' "$gone"
	run_dir new now
	run_dir busy '10 minutes ago' "$gone"
	# a process whose root is in there: sleep and what it loads
	for lib in /bin/sleep $(ldd /bin/sleep | grep -o '/[^ ]*'); do
		cp --parents -L "$lib" "$DDP_FRESH_DIR/slurm-ddp-fresh.busy/root"
	done
	chroot "$DDP_FRESH_DIR/slurm-ddp-fresh.busy/root" /bin/sleep 60 &
	INSIDE=$!
	touch -d '10 minutes ago' "$DDP_FRESH_DIR/slurm-ddp-fresh.busy"
	run "$FRESH" --clean
	assert_success
	assert_line "fresh: removing $DDP_FRESH_DIR/slurm-ddp-fresh.killed, a root a killed run left"
	assert_line "fresh: removing $DDP_FRESH_DIR/slurm-ddp-fresh.nopid, a root a killed run left"
	[ "${#lines[@]}" = 2 ]
	[ ! -e "$DDP_FRESH_DIR/slurm-ddp-fresh.killed" ]
	[ ! -e "$DDP_FRESH_DIR/slurm-ddp-fresh.nopid" ]
	[ -d "$DDP_FRESH_DIR/slurm-ddp-fresh.live/root" ]
	[ -d "$DDP_FRESH_DIR/slurm-ddp-fresh.kept/root" ]
	[ -d "$DDP_FRESH_DIR/slurm-ddp-fresh.new/root" ]
	[ -d "$DDP_FRESH_DIR/slurm-ddp-fresh.busy/root" ]
}

@test "fresh.sh: a suite it does not know, or no command, refused naming what it expected" {
	run "$FRESH" buster make check
	assert_failure
	assert_output "fresh: suite 'buster': expected bookworm, trixie or sid"
	run "$FRESH" trixie
	assert_failure
	assert_output --partial "usage: fresh.sh SUITE CMD... (SUITE: bookworm, trixie or sid), or fresh.sh --clean"
}
