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
# Each phase ends with its time ("# --- unit: 20 s"), each Bats test with its own.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2
what=${1:-all}
if [ "$what" = bats-claim ]; then # (run_bats's second worker: LOG WHO)
	log=$2
else
	log=$(mktemp -d "${TMPDIR:-/tmp}/ddp-check.XXXXXX")
	trap 'beside_stop; tests/cluster/cluster.sh stop >/dev/null 2>&1; rm -rf "$log"' EXIT
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

# The longest unit test (the GPU step through cuemu, minutes of one core)
# runs in the background from the start of the plain pass, beside the other
# tests and, in a full run, the sanitizer pass and the fuzz run, which runs
# one target at a time (CI has 2 cores): its output is printed whole when
# beside_end collects it.
beside=test_gpu_step_emu beside_pid='' beside_t0=0

beside_start() {
	local t=$1
	beside_t0=$SECONDS
	(CUEMU_STREAMS=lazy "$t" >"$log/beside.out" 2>&1; echo $? >"$log/beside.rc") &
	beside_pid=$!
}

# on an early exit: the background tests and their subshells
beside_stop() {
	if [ -n "${beside_pid:-}" ]; then
		pkill -P "$beside_pid" 2>/dev/null
		kill "$beside_pid" 2>/dev/null
	fi
	[ -z "${bats_beside_pid:-}" ] || kill -- "-$bats_beside_pid" 2>/dev/null
	return 0
}

beside_end() {
	[ -n "$beside_pid" ] || return 0
	wait "$beside_pid"
	beside_pid=
	# shellcheck disable=SC2016 # (the inner shell expands them)
	tap "$beside" sh -c 'cat "$1"; exit "$(cat "$2")"' sh "$log/beside.out" "$log/beside.rc"
	echo "# --- $beside: $((SECONDS - beside_t0)) s, beside the others" | tee -a "$log/times"
}

run_unit() {
	local san=${1:-} dir t
	if ! SANITIZER=$san make -s -j"$(nproc)" -C tests unit >"$log/build$san.log" 2>&1; then
		cat "$log/build$san.log"
		echo "not ok - building the unit tests${san:+ with SANITIZER=$san} failed" | tee "$log/build$san.tap"
		return
	fi
	dir=build/tests${san:+-san}
	[ -z "$san" ] && [ -x "$dir/$beside" ] && beside_start "$dir/$beside"
	for t in "$dir"/test_*; do
		[ -z "$san" ] && [ "$(basename "$t")" = "$beside" ] && continue
		# the emulated kernels' race check (each launch run twice) is
		# the plain pass's; under the sanitizers one order is enough.
		# Streams lazy: each stream's work held until something waits
		# for it, so a missing wait or graph edge changes a result
		CUEMU_ORDER=${san:+forward} CUEMU_STREAMS=lazy tap "$(basename "$t")${san:+-$san}" "$t"
	done
}

# clang's static analyzer over the C and C++ code, in its own build tree
# (make analyze): a finding is a failing test, its warnings printed; the
# HTML reports stay under build/analyze/report.  Then shellcheck over the
# shell scripts (warnings and errors; its info and style notes are not).
run_analyze() {
	local scripts=(scripts/*.sh bench/*.sh tests/cluster/*.sh tests/run.sh tests/bats/*.sh
		contrib/sbatch/*.sbatch .ci/run)
	if ! command -v shellcheck >/dev/null; then
		echo "not ok - shellcheck: it is missing (scripts/deps.sh installs it)" | tee "$log/shellcheck.tap"
	elif shellcheck -S warning "${scripts[@]}" >"$log/shellcheck.log" 2>&1; then
		echo "ok - shellcheck: no warning in ${#scripts[@]} shell scripts" | tee "$log/shellcheck.tap"
	else
		head -n 60 "$log/shellcheck.log"
		echo "not ok - shellcheck: warnings in the shell scripts (above)" | tee "$log/shellcheck.tap"
	fi
	if ! command -v scan-build >/dev/null; then
		echo "not ok - analyze: scan-build is missing (scripts/deps.sh installs clang-tools)" | tee "$log/analyze.tap"
		return
	fi
	if make -s analyze >"$log/analyze.log" 2>&1; then
		echo "ok - analyze: clang's static analyzer finds nothing in the C and C++ code" | tee "$log/analyze.tap"
	else
		grep -E -A3 'warning:|error:|scan-build: Run' "$log/analyze.log" | head -n 80
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
	if make -s -j"$(nproc)" -C tests/fuzz run TIME="$t" >"$log/fuzz.log" 2>&1; then
		grep '^#' "$log/fuzz.log"
		grep -o '^# fuzz_[a-z]*' "$log/fuzz.log" | sort -u | sed 's/^# /ok - /; s/$/: no crash, leak or hang/' | tee "$log/fuzz.tap"
	else
		tail -n 40 "$log/fuzz.log"
		echo "not ok - fuzz: a target failed (inputs under build/fuzz/)" | tee "$log/fuzz.tap"
	fi
}

# The Bats files that need no cluster, longest first (gpu_emu.bats: cnn_train
# on cuemu, a core for half the Bats time).  In a full run two workers share
# them: one runs them from the start, beside the cluster's files, whose tests
# mostly wait on Slurm and the network (about 0.8 of CI's 2 cores busy); the
# other, the cluster's, takes what is left once its own files are done.  A
# file goes to the first worker that claims it (a rename, atomic); each
# file's TAP is printed whole when both end.
bats_free=(tests/bats/gpu_emu.bats tests/bats/bench.bats tests/bats/gpu_bundle.bats
	tests/bats/trainer_local.bats tests/bats/valgrind_local.bats tests/bats/man.bats)
bats_beside_pid=''

# bats_claim LOG WHO: run the queued free files, one at a time, until none
# is left; each file's output, status, seconds and worker under LOG/free/
bats_claim() {
	local log=$1 who=$2 e s
	for e in "$log"/queue/*; do
		[ -e "$e" ] || continue
		mv "$e" "$log/free/" 2>/dev/null || continue # the other worker's
		e=$log/free/$(basename "$e")
		s=$(date +%s)
		bats --formatter tap --timing "$(cat "$e")" >"$e.out" 2>&1
		echo $? >"$e.rc"
		echo "$(($(date +%s) - s)) s, $who" >"$e.secs"
	done
}

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
	local f files=() t0=$SECONDS t1 i=10 e
	mkdir -p "$log/queue" "$log/free"
	for f in tests/bats/*.bats; do
		[[ " ${bats_free[*]} " == *" $f "* ]] || files+=("$f")
	done
	for f in "${bats_free[@]}"; do
		echo "$f" >"$log/queue/$i"
		i=$((i + 1))
	done
	# a session of its own: an early exit ends its whole tree (beside_stop)
	setsid "$repo/tests/run.sh" bats-claim "$log" "beside the cluster's files" &
	bats_beside_pid=$!
	for f in "${files[@]}"; do
		t1=$SECONDS
		tap "bats-$(basename "$f" .bats)" bats --formatter tap --timing "$f"
		echo "# --- bats $f: $((SECONDS - t1)) s"
	done
	echo "# --- bats, the cluster's files: $((SECONDS - t0)) s" | tee -a "$log/times"
	bats_claim "$log" "after the cluster's files"
	wait "$bats_beside_pid"
	bats_beside_pid=
	for e in "$log"/free/*.out; do
		e=${e%.out}
		f=$(cat "$e")
		# shellcheck disable=SC2016 # (the inner shell expands them)
		tap "bats-$(basename "$f" .bats)" sh -c 'cat "$1"; exit "$(cat "$2")"' sh "$e.out" "$e.rc"
		echo "# --- bats $f: $(cat "$e.secs")" | tee -a "$log/times"
	done
}

# PHASE ARGS...: run_PHASE, then say how long it took (make check has 20
# minutes on CI's 2 cores: this says where they go)
timed() {
	local t0=$SECONDS
	"run_$1" "${@:2}"
	echo "# --- $1${2:+ $2}: $((SECONDS - t0)) s" | tee -a "$log/times"
}

case "$what" in
bats-claim) bats_claim "$2" "$3"; exit 0 ;;
unit) timed unit; beside_end ;;
analyze) timed analyze ;;
fuzz) timed fuzz ;;
bats) shift; timed bats "$@" ;;
all)
	timed unit
	timed unit address,undefined
	timed analyze
	timed fuzz
	beside_end
	timed bats
	;;
*) echo "usage: tests/run.sh [unit|analyze|fuzz|bats [FILE]]" >&2; exit 2 ;;
esac

pass=$(cat "$log"/*.tap | grep -E '^ok ' | grep -v -i -c '# skip')
skip=$(cat "$log"/*.tap | grep -E '^ok ' | grep -i -c '# skip')
fail=$(cat "$log"/*.tap | grep -c -E '^not ok ')
echo
cat "$log/times"
echo "check: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
