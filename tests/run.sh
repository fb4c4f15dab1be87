#!/bin/bash
# Run every test of slurm-ddp and print one closing count line:
#   check: N passed, M failed, K skipped
# Exit status is non-zero when anything failed.
#
#   tests/run.sh            unit tests, unit tests under ASan+UBSan, clang's
#                           static analyzer and shellcheck, a short fuzz run,
#                           Bats on a real cluster
#   tests/run.sh unit       only the C unit tests
#   tests/run.sh analyze    only the static analysis (make analyze, shellcheck)
#   tests/run.sh fuzz       only the fuzz targets (DDP_FUZZ_TIME seconds each, 12)
#   tests/run.sh bats [F]   only the Bats tests (or file F)
#   tests/run.sh releases   only the other Slurm releases' suites
#                           (tests/cluster/release.sh check REL for each)
#
# A full run ends with the other Slurm releases: for each, its -Werror build,
# unit tests and the Bats files that touch Slurm, in a Debian root of that
# release.  DDP_RELEASES names them (default: every supported release but
# this machine's own, and 25.05 or 25.11 where DDP_SLURM_TARBALLS names
# SchedMD's tarball of it; "none": none).
# Each phase ends with its time ("# --- unit: 20 s"), each unit test program and each Bats
# test with its own.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The jobs below run beside each other on the same cores (a worker beside
# the unit tests and the cluster's files).  An OpenMP program (oneDNN,
# cnn_train's CPU path) whose threads spin at each barrier, libgomp's
# default, while one of them has no core spins out every barrier: the GPU
# step's bf16 emulation took 60 s there against 6 s alone.  Passive: a
# waiting thread sleeps.  (A value set by the caller is kept.)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$repo" || exit 2
what=${1:-all}
if [ "$what" = claim ]; then # (a background worker: LOG WHO; see jobs_start)
	log=$2
else
	log=$(mktemp -d "${TMPDIR:-/tmp}/ddp-check.XXXXXX")
	trap 'jobs_stop; tests/cluster/cluster.sh stop >/dev/null 2>&1; rm -rf "$log"' EXIT
fi

# Run a TAP producer, echo its output, keep it for counting.
tap() {
	local name=$1; shift
	echo "# --- $name"
	"$@" 2>&1 | tee "$log/$name.tap"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$log/$name.tap"; then
		echo "not ok - $name exited with status $rc without a failing test (crash?)" | tee -a "$log/$name.tap"
	fi
}

# The jobs that need no cluster: the longest unit test (the GPU step
# through cuemu), the analyzer, the fuzz run and the Bats files that start
# no cluster.  They wait in a queue (LOG/queue, one file each, longest
# first), and workers take them one at a time: background ones beside the
# unit tests and the cluster's Bats files (whose tests wait on Slurm and
# the network as much as they compute), and this shell once its own part
# is done.  A job goes to the first worker that claims it (a rename,
# atomic); its output, printed whole when all have ended, its status, its
# seconds and its worker go under LOG/jobs.
job_n=10 job_pids=()
# make's jobs in a phase: one in a worker (the others' cores are busy)
jobs_j=$(nproc)

# queue KIND ARG: KIND bats (a Bats file), test (a unit test program) or
# phase (run_ARG, which keeps its own TAP)
queue() {
	mkdir -p "$log/queue" "$log/jobs"
	echo "$1 $2" >"$log/queue/$job_n"
	job_n=$((job_n + 1))
}

# claim WHO: run queued jobs until none is left
claim() {
	local who=$1 e kind arg s
	for e in "$log"/queue/*; do
		[ -e "$e" ] || continue
		mv "$e" "$log/jobs/" 2>/dev/null || continue # another worker's
		e=$log/jobs/$(basename "$e")
		read -r kind arg <"$e"
		s=$(date +%s)
		case $kind in
		bats) bats --formatter tap --timing "$arg" >"$e.out" 2>&1 ;;
		test) CUEMU_STREAMS=lazy "$arg" >"$e.out" 2>&1 ;;
		phase) "run_$arg" >"$e.out" 2>&1 ;;
		esac
		echo $? >"$e.rc"
		echo "$(($(date +%s) - s)) s, $who" >"$e.secs"
	done
}

# jobs_start WHO: one more background worker, in a session of its own (an
# early exit ends its whole tree: jobs_stop)
jobs_start() {
	[ -d "$log/queue" ] || return 0
	setsid "$repo/tests/run.sh" claim "$log" "$1" &
	job_pids+=("$!")
}

jobs_stop() {
	local p
	for p in ${job_pids[@]+"${job_pids[@]}"}; do
		kill -- "-$p" 2>/dev/null
	done
	return 0
}

# jobs_end WHO: this shell takes what is left, waits for the workers, then
# prints each job's output and time in the queue's order
jobs_end() {
	[ -d "$log/queue" ] || return 0
	claim "$1"
	local p e kind arg
	for p in ${job_pids[@]+"${job_pids[@]}"}; do
		wait "$p"
	done
	job_pids=()
	for e in "$log"/jobs/*.secs; do
		e=${e%.secs}
		read -r kind arg <"$e"
		# shellcheck disable=SC2016 # (the inner shell expands them)
		case $kind in
		bats) tap "bats-$(basename "$arg" .bats)" sh -c 'cat "$1"; exit "$(cat "$2")"' sh "$e.out" "$e.rc" ;;
		test) tap "$(basename "$arg")" sh -c 'cat "$1"; exit "$(cat "$2")"' sh "$e.out" "$e.rc" ;;
		phase) cat "$e.out" ;;
		esac
		[ "$kind" = phase ] || arg=${arg#build/tests/}
		echo "# --- $arg: $(cat "$e.secs")" | tee -a "$log/times"
	done
	rm -rf "$log/queue" "$log/jobs"
}

# The longest unit test: a job of its own
slow_test=test_gpu_step_emu

run_unit() {
	local san=${1:-} dir t t0
	build_unit "$san" || return
	dir=build/tests${san:+-san}
	for t in "$dir"/test_*; do
		[ -z "$san" ] && [ "$(basename "$t")" = "$slow_test" ] && continue # (a job)
		# the emulated kernels' race check (each launch run twice) is
		# the plain pass's; under the sanitizers one order is enough.
		# Streams lazy: each stream's work held until something waits
		# for it, so a missing wait or graph edge changes a result
		t0=$SECONDS
		CUEMU_ORDER=${san:+forward} CUEMU_STREAMS=lazy tap "$(basename "$t")${san:+-$san}" "$t"
		echo "# --- $(basename "$t")${san:+-$san}: $((SECONDS - t0)) s"
	done
}

# clang's static analyzer over the C and C++ code, in its own build tree
# (make analyze): a finding is a failing test, its warnings printed; the
# HTML reports stay under build/analyze/report.  Then shellcheck over the
# shell scripts (warnings and errors; its info and style notes are not).
run_analyze() {
	local scripts=(scripts/*.sh bench/*.sh tests/cluster/*.sh tests/run.sh tests/bats/*.sh
		tests/tools/analyze-cc contrib/sbatch/*.sbatch .ci/run)
	if ! command -v shellcheck >/dev/null; then
		echo "not ok - shellcheck: it is missing (scripts/deps.sh installs it)" | tee "$log/shellcheck.tap"
	elif shellcheck -S warning "${scripts[@]}" >"$log/shellcheck.log" 2>&1; then
		echo "ok - shellcheck: no warning in ${#scripts[@]} shell scripts" | tee "$log/shellcheck.tap"
	else
		head -n 60 "$log/shellcheck.log"
		echo "not ok - shellcheck: warnings in the shell scripts (above)" | tee "$log/shellcheck.tap"
	fi
	# The Bats files too (shellcheck reads their @test blocks as functions),
	# less two checks that only see Bats' own variables there: SC2154
	# (run sets status, output and stderr) and SC2034 (BATS_TEST_TIMEOUT,
	# and the globals helpers.bash sets for the files that load it)
	local bats_files=(tests/bats/*.bats tests/bats/*.bash)
	if ! command -v shellcheck >/dev/null; then
		:   # (said above)
	elif shellcheck -S warning -e SC2154,SC2034 "${bats_files[@]}" >"$log/shellcheck-bats.log" 2>&1; then
		echo "ok - shellcheck: no warning in ${#bats_files[@]} Bats files" | tee "$log/shellcheck-bats.tap"
	else
		head -n 60 "$log/shellcheck-bats.log"
		echo "not ok - shellcheck: warnings in the Bats files (above)" | tee "$log/shellcheck-bats.tap"
	fi
	# Bats runs a test under set -e, which ignores a command negated with !:
	# `! grep -q x file` fails no test (unless it is the test's last line)
	local neg
	neg=$(grep -nE '^[[:space:]]+! ' tests/bats/*.bats tests/bats/*.bash | grep -v '|| false$')
	if [ -n "$neg" ]; then
		echo "$neg"
		echo "not ok - bats: a negated command above fails no test (set -e ignores it): end it with || false" |
			tee "$log/negation.tap"
	else
		echo "ok - bats: every negated command in the Bats files can fail its test" | tee "$log/negation.tap"
	fi
	# ... and every test of an && list of tests but its last: `[ "$a" -eq 1 ]
	# && [ "$b" -eq 1 ]` fails no test where $a is wrong.  One test a line
	# (an && list that guards a command, `[ -f x ] && break`, is not one).
	local andl
	andl=$(grep -nE '^[[:space:]]+\[\[? .*\]\]? && \[' tests/bats/*.bats | grep -v '||' || true)
	if [ -n "$andl" ]; then
		echo "$andl"
		echo "not ok - bats: a test above in an && list fails no test unless it is the last (set -e): one a line" |
			tee "$log/andlist.tap"
	else
		echo "ok - bats: no test in the Bats files hides in an && list" | tee "$log/andlist.tap"
	fi
	if ! command -v clang >/dev/null; then
		echo "not ok - analyze: clang is missing (scripts/deps.sh installs it)" | tee "$log/analyze.tap"
		return
	fi
	if make -s analyze NPROC="$jobs_j" >"$log/analyze.log" 2>&1; then
		echo "ok - analyze: clang's static analyzer finds nothing in the C and C++ code" | tee "$log/analyze.tap"
	else
		grep -E -A3 'warning:|error:|^analyze: ' "$log/analyze.log" | head -n 80
		echo "not ok - analyze: clang's static analyzer has findings (make analyze; reports under build/analyze/report)" | tee "$log/analyze.tap"
	fi
}

# libFuzzer targets for ddp.yaml and the environment, briefly: a crash, a
# leak or a hang is a failing test.  `make fuzz` runs them for long.
run_fuzz() {
	local t=${DDP_FUZZ_TIME:-12}
	if ! command -v clang >/dev/null; then
		echo "not ok - fuzz: clang is missing (scripts/deps.sh installs it)" | tee "$log/fuzz.tap"
		return
	fi
	echo "# --- fuzz ($t s per target)"
	if make -s -j"$jobs_j" -C tests/fuzz run TIME="$t" >"$log/fuzz.log" 2>&1; then
		grep '^#' "$log/fuzz.log"
		grep -o '^# fuzz_[a-z]*' "$log/fuzz.log" | sort -u | sed 's/^# /ok - /; s/$/: no crash, leak or hang/' | tee "$log/fuzz.tap"
	else
		tail -n 40 "$log/fuzz.log"
		echo "not ok - fuzz: a target failed (inputs under build/fuzz/)" | tee "$log/fuzz.tap"
	fi
}

# The Bats files that start no cluster, longest first (gpu_emu.bats: cnn_train
# on cuemu, minutes of one core): jobs
bats_free=(tests/bats/gpu_emu.bats tests/bats/bench.bats tests/bats/gpu_bundle.bats
	tests/bats/trainer_local.bats tests/bats/valgrind_local.bats tests/bats/ddp_check_emu.bats tests/bats/ddp_check_node.bats
	tests/bats/man.bats tests/bats/release.bats tests/bats/fresh.bats)

# run_bats [FILE...]: those files, or every file that starts a cluster, one
# at a time, each file's time said (the others are jobs: queue_all)
run_bats() {
	if [ "$(id -u)" != 0 ]; then
		echo "ok - Bats cluster tests # skip: need root for network namespaces and slurmd" | tee "$log/bats.tap"
		return
	fi
	tests/cluster/cluster.sh stop >/dev/null 2>&1 # a previous run's leftovers, if any
	if [ "$#" -gt 0 ]; then
		tap bats bats --formatter tap --timing "$@"
		return
	fi
	local f t1
	for f in tests/bats/*.bats; do
		[[ " ${bats_free[*]} " != *" $f "* ]] || continue
		t1=$SECONDS
		tap "bats-$(basename "$f" .bats)" bats --formatter tap --timing "$f"
		echo "# --- bats $f: $((SECONDS - t1)) s"
	done
}

# queue_bats [FILE...]: those of the Bats files that start no cluster (all
# of them) as jobs; as root only (the Bats tests are skipped whole otherwise)
queue_bats() {
	local f
	[ "$(id -u)" = 0 ] || return 0
	for f in "${@:-${bats_free[@]}}"; do
		queue bats "$f"
	done
}

# The releases a full run checks besides this machine's (DDP_RELEASES)
releases() {
	local host rel
	if [ -n "${DDP_RELEASES:-}" ]; then
		[ "$DDP_RELEASES" = none ] || echo "$DDP_RELEASES"
		return
	fi
	host=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null)
	for rel in 22.05:bookworm 24.11:trixie 26.05:sid; do
		[ "${rel#*:}" = "$host" ] || echo "${rel%%:*}"
	done
	# the releases built from SchedMD's tarball (tests/cluster/release.sh):
	# slurm-25.11.7.tar.bz2 is 25.11
	local tb
	for tb in ${DDP_SLURM_TARBALLS:-}; do
		tb=${tb##*/}
		if [[ "$tb" =~ ^slurm-(25\.(05|11))\.[0-9]+\.tar ]]; then echo "${BASH_REMATCH[1]}"; fi
	done
}

# Each release's suite, one after the other (each starts its own cluster)
run_releases() {
	local rel t1
	if [ "$(id -u)" != 0 ]; then
		echo "ok - the other Slurm releases # skip: need root (chroot, mounts, the test cluster)" | tee "$log/releases.tap"
		return
	fi
	for rel in $(releases); do
		t1=$SECONDS
		tap "release-$rel" tests/cluster/release.sh check "$rel"
		echo "# --- release $rel: $((SECONDS - t1)) s" | tee -a "$log/times"
	done
}

# build_unit [SANITIZER]: the unit tests built, or their failure a test
build_unit() {
	local san=${1:-}
	SANITIZER=$san make -s -j"$(nproc)" -C tests unit >"$log/build$san.log" 2>&1 && return
	cat "$log/build$san.log"
	echo "not ok - building the unit tests${san:+ with SANITIZER=$san} failed" | tee "$log/build$san.tap"
	return 1
}

# PHASE ARGS...: run_PHASE, then say how long it took (make check has 20
# minutes on CI's 2 cores: this says where they go)
timed() {
	local t0=$SECONDS
	"run_$1" "${@:2}"
	echo "# --- $1${2:+ ${*:2}}: $((SECONDS - t0)) s" | tee -a "$log/times"
}

# make check has 20 minutes on CI's 2 cores; the cluster's Bats files keep
# about 1.25 of them busy alone (613 core-seconds in 492 s, measured on a
# 2-core VM), in bursts.  A full run: both unit trees built first
# (gpu_emu.bats runs the sanitized GPU module), one worker beside the unit
# tests and the cluster's files, a second beside those where there are 3
# cores or more.  On that VM a fresh clone took 1,166 and 1,225 s with the
# second worker (the cluster's files 888 and 908 s, 492 alone) and 1,207 s
# without (they 733 s): the same within its noise, easier on the cluster.
slow_job() {
	[ -x "build/tests/$slow_test" ] && queue test "build/tests/$slow_test"
	return 0
}

case "$what" in
claim) jobs_j=1; claim "$3"; exit 0 ;;
unit)
	build_unit && slow_job && jobs_start "beside the unit tests"
	timed unit
	jobs_end "after the unit tests"
	;;
analyze) timed analyze ;;
fuzz) timed fuzz ;;
bats)
	shift
	[ "$#" -gt 0 ] || { queue_bats; jobs_start "beside the cluster's files"; }
	timed bats "$@"
	jobs_end "after the cluster's files"
	;;
all)
	t0=$SECONDS
	build_unit && build_unit address,undefined
	echo "# --- building the unit tests, plain and sanitized: $((SECONDS - t0)) s" | tee -a "$log/times"
	# longest first, as measured alone on a 2-core VM: gpu_emu.bats 300
	# core-seconds, the analyzer 150 (on both cores), the GPU step 140,
	# bench.bats 100, the fuzz run 60, the other Bats files 60 and less
	queue_bats tests/bats/gpu_emu.bats
	queue phase analyze
	slow_job
	queue_bats tests/bats/bench.bats
	queue phase fuzz
	queue_bats "${bats_free[@]:2}"
	jobs_start "worker 1, from the unit tests on"
	timed unit
	timed unit address,undefined
	[ "$(nproc)" -lt 3 ] || jobs_start "worker 2, from the cluster's files on"
	timed bats
	timed releases
	jobs_end "after the cluster's files and the other releases"
	;;
releases) timed releases ;;
*) echo "usage: tests/run.sh [unit|analyze|fuzz|bats [FILE]|releases]" >&2; exit 2 ;;
esac

pass=$(cat "$log"/*.tap | grep -E '^ok ' | grep -v -i -c '# skip')
skip=$(cat "$log"/*.tap | grep -E '^ok ' | grep -i -c '# skip')
fail=$(cat "$log"/*.tap | grep -c -E '^not ok ')
echo
cat "$log/times"
# the failures again, each after its file's name: what a CI log's tail shows
if [ "$fail" -gt 0 ]; then
	echo "# failed:"
	grep -H -E '^not ok ' "$log"/*.tap | sed "s|^$log/||; s|\.tap:| |; s|^|#   |" | cut -c1-300
fi
echo "check: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
