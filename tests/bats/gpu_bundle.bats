#!/usr/bin/env bats
# scripts/gpu-bundle.sh: what a lent GPU machine runs (it has CUDA but no
# Debian packages and no network).  A GPU session has 15 minutes of device
# time; a bundle that does not fit the device tool's carry, a library left
# out or a run.sh that breaks costs them.  Here the bundle is built and
# run as it is there, with CUDA's libraries from /usr/local/cuda and, for
# training, the GPU module built on cuemu (GPU_BUNDLE_MODULE).
# bats file_tags=gpu

load helpers

B="$BATS_FILE_TMPDIR/gpu"
EMU="$REPO/build/tests/cuemu/cnn_train_cuda_emu.so"
SMALL=(--train-limit 64 --test-limit 16 --batch-size 8 --progress lines --log-every 1000 --precision fp32 --conv1 direct)

setup_file() {
	[ -f "$REPO/build/lib/cnn_train_cuda.so" ] || return 0
	# xz -1: a few seconds where the default takes a minute; the size
	# test below holds for the default's smaller archive too
	GPU_BUNDLE_DIR="$B" XZ_OPT=-1 "$REPO/scripts/gpu-bundle.sh" >"$BATS_FILE_TMPDIR/bundle.log" 2>&1 ||
		{ cat "$BATS_FILE_TMPDIR/bundle.log" >&3; return 1; }
}

setup() {
	[ -f "$REPO/build/lib/cnn_train_cuda.so" ] || skip "built without nvcc: no GPU module, no bundle"
}

@test "the bundle fits the device tool's carry (64 MiB) and holds the programs, libraries and data" {
	# what gpu-bundle.sh wrote (not what run.sh unpacks and writes there)
	local bytes
	bytes=$(du -sb --exclude=lib --exclude=lib-ours --exclude=logs --exclude='*.log' "$B" | cut -f1)
	echo "bundle: $bytes bytes"
	[ "$bytes" -lt $((64 * 1024 * 1024)) ]
	local p
	for p in cnn_train ddp-check test_cuda_kernels test_gpu_step h2d_bind cnn_train_cuda.so; do
		[ -f "$B/bin/$p" ] || fail "bin/$p is missing"
	done
	[ -f "$B/lib.tar.xz" ]
	[ -x "$B/run.sh" ]
	[ "$(ls "$B"/data/*-ubyte.gz | wc -l)" -eq 4 ]
	# CUDA's own libraries are the machine's, named for run.sh to find
	grep -qx 'libcudnn.so.9' "$B/cuda-libs"
	grep -qx 'libnccl.so.2' "$B/cuda-libs"
	! tar -tJf "$B/lib.tar.xz" | grep -E 'libcudnn|libnccl|libcublas|libcudart|libcuda\.so' || false
}

@test "run.sh finds every CUDA library and each program loads all of its own" {
	run --separate-stderr "$B/run.sh" libs
	echo "$stderr"
	assert_success
	local lib
	while read -r lib; do
		assert_line --regexp "^$lib: /"
	done <"$B/cuda-libs"
}

# A library of the bundle that does not load (here a damaged copy: a
# missing one would be found in this machine's own /usr/lib, which the GPU
# machine has not) stops run.sh before anything runs, naming the program.
@test "run.sh names a program that cannot load a library, and runs nothing" {
	"$B/run.sh" libs >/dev/null   # unpacks lib/
	local gloo
	gloo=$(cd "$B/lib" && ls libgloo.so*)
	cp "$B/lib/$gloo" "$BATS_TEST_TMPDIR/"
	: >"$B/lib/$gloo"
	run --separate-stderr "$B/run.sh" train
	cp "$BATS_TEST_TMPDIR/$gloo" "$B/lib/"
	echo "$stderr"
	assert_equal "$status" 2
	[[ "$stderr" == *"run.sh: cnn_train cannot load its libraries:"* ]]
	[[ "$stderr" == *"$B/lib/$gloo: file too short"* ]]
	assert_output ""
}

@test "run.sh train: cnn_train from the bundle trains at world 1, with no communicator (cuemu's module)" {
	[ -f "$EMU" ] || skip "no cuemu GPU module ($EMU)"
	GPU_BUNDLE_MODULE="$EMU" run --separate-stderr "$B/run.sh" train "${SMALL[@]}" --epochs 1
	echo "$stderr"
	assert_success
	assert_line --regexp "^# cnn_train: world 1 \(local\), model 1x28x28->10 \(1199882 params\), data fashion-mnist \(64 train, 16 test\) from $B/data$"
	assert_line --regexp '^# GPU: cuemu .*, fp32, conv1 direct, batch 8 cuDNN: conv2 forward [A-Z0-9_]+ .*, batch 8 fc2 (fused|cuBLAS) .*, batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms; the step.s graph timed in each layout at its capture\), batch 16 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\), CUDA graph, backward streams auto \(1 or 2: the step.s graph timed both ways\), programmatic launch auto \(the step.s graph timed with and without\)$'
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(16 images\)$'
	assert_line --regexp '^done: 8 steps, '
}

@test "run.sh gloo2: two ranks on the one GPU over gloo agree (cuemu's module)" {
	[ -f "$EMU" ] || skip "no cuemu GPU module ($EMU)"
	GPU_BUNDLE_MODULE="$EMU" run --separate-stderr "$B/run.sh" gloo2 "${SMALL[@]}" --max-steps 4
	echo "$stderr"
	assert_success
	assert_line --regexp '^# cnn_train: world 2 \(gloo\), '
	assert_line --regexp '^# GPU: cuemu .*, no graph \(gradients all-reduced through host memory\), backward streams auto: 1 \(no graph to time both ways\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^done: 4 steps, '
}

# `run.sh kernels` on a stand-in ncu: it lists every metric of
# ncu_kernels.py but one (as a GPU whose ncu names the tensor pipe
# otherwise), records how it was called, runs the program it was given
# (cnn_train on cuemu's module: its options must parse and reach the
# profiled step) and answers one launch per metric it was asked for.
@test "run.sh kernels: asks ncu for the metrics it lists, leaves out and names the others, a table per batch size (stand-in ncu, cuemu's module)" {
	[ -f "$EMU" ] || skip "no cuemu GPU module ($EMU)"
	local bin="$BATS_TEST_TMPDIR/bin" args="$BATS_TEST_TMPDIR/ncu.args"
	mkdir -p "$bin"
	cat >"$bin/ncu" <<-'NCU'
	#!/bin/bash
	if [ "$1" = --query-metrics ]; then
		printf 'Device NVIDIA Stand-in (GH100)\n---------\nMetric Name   Metric Type   Metric Description\n'
		for m in gpu__time_duration sm__throughput gpu__compute_memory_throughput dram__throughput \
			sm__pipe_tensor_cycles_active sm__warps_active \
			l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld \
			l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st \
			smsp__warp_issue_stalled_long_scoreboard_per_warp_active \
			smsp__warp_issue_stalled_barrier_per_warp_active \
			smsp__warp_issue_stalled_short_scoreboard_per_warp_active \
			smsp__warp_issue_stalled_mio_throttle_per_warp_active \
			smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active; do
			echo "$m   Counter   a description"
		done
		exit 0
	fi
	echo "$*" >>"$NCU_ARGS"
	metrics=
	while [ $# -gt 0 ]; do
		case $1 in
		--profile-from-start) shift 2 ;;
		--metrics) metrics=$2; shift 2 ;;
		--csv) shift ;;
		*) break ;;
		esac
	done
	"$@" || exit
	echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
	IFS=, read -ra ms <<<"$metrics"
	for m in "${ms[@]}"; do
		echo "\"0\",\"1\",\"cnn_train\",\"h\",\"void k(float *)\",\"1\",\"13\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"s\",\"$m\",\"usecond\",\"5\""
	done
	NCU
	chmod +x "$bin/ncu"
	PATH="$bin:$PATH" NCU_ARGS="$args" GPU_BUNDLE_MODULE="$EMU" BATCHES="16 8" \
		run --separate-stderr "$B/run.sh" kernels --train-limit 64 --test-limit 16 --precision fp32 \
		--conv1 direct --epochs 6
	echo "$stderr"
	assert_success
	assert_line "run.sh: left out, not in ncu --query-metrics here: sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
	assert_equal "$(grep -c '^kernel  *us/step  *calls  *share  *sm%  *mem%  *dram%  *tc%  *warps%  *regs  *blocks  *bc_ld  *bc_st  *lsb%  *bar%  *ssb%  *mio%  *mth%$' <<<"$output")" 2
	assert_equal "$(grep -c '^# GPU: cuemu ' <<<"$output")" 2
	# each batch size's call: one replayed step, the metrics this ncu lists
	assert_equal "$(wc -l <"$args")" 2
	local b
	for b in 16 8; do
		grep -q -- "--max-steps 21 --cuda-profile-steps 21:21 .*--batch-size $b " "$args" ||
			fail "no call at batch $b: $(cat "$args")"
	done
	! grep -q -- '--batch-size .*--batch-size' "$args" || false
	grep -q -- '--metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,.*sm__pipe_tensor_cycles_active' "$args"
	! grep -q hmma "$args" || false
	# and cnn_train reached the step (no warning of a range past the run)
	refute_line --partial 'warning: --cuda-profile-steps'
}

# A lease holds 15 minutes of device time, the machine's start included:
# one call of `run.sh session`, which must end by its deadline whatever its
# parts do, bring its logs back within $OUT's limits (8 files, plain
# names: more logs travel as one archive) and say which parts ran and which
# did not fit.
SESSION_PARTS=(kernels_test gpu_step ddp_check bench_tf32 compile startup accuracy profile bench_bf16)

@test "run.sh session: every part in order, each bounded by what is left of SESSION_SECONDS, logs in \$OUT" {
	local out="$BATS_TEST_TMPDIR/out" start end
	mkdir -p "$out"
	start=$(date +%s)
	OUT="$out" SESSION_SECONDS=17 run --separate-stderr "$B/run.sh" session
	end=$(date +%s)
	echo "$output"
	assert_success
	# ended by its deadline (timeout's 5 s grace after a part's bound)
	[ $((end - start)) -le 22 ] || fail "ran $((end - start)) s for SESSION_SECONDS=17"
	# the summary names every part once, in the order they ran
	local names ran=0 n
	names=$(sed -n '/^=== summary/,$p' <<<"$output" | tail -n +2 | awk '{print $1}' | paste -sd' ')
	assert_equal "$names" "${SESSION_PARTS[*]}"
	# no part was given more than the 12 s left before its start
	while read -r n; do
		[ "$n" -le 12 ] || fail "a part was bounded to $n s"
		ran=$((ran + 1))
	done < <(sed -n 's/^=== [a-z0-9_]*: .*at most \([0-9]*\)s)$/\1/p' <<<"$output")
	[ "$ran" -ge 1 ]
	# each part that ran left one log, named as $OUT brings back, and no more
	[ "$ran" -le 8 ] || skip "$ran parts ran in 17 s: the archive's test below"
	assert_equal "$(ls "$out" | wc -l)" "$ran"
	! find "$out" -mindepth 1 -maxdepth 1 -printf '%f\n' | grep -v -E '^[A-Za-z0-9._-]+$' || false
	assert_equal "$(grep -c '^[a-z0-9_]* *skipped: ' <<<"$output")" $((${#SESSION_PARTS[@]} - ran))
}

# More parts than $OUT brings back files: their logs travel as one archive
# (here every program a stand-in that ends at once, so that all 9 run).
@test "run.sh session: 9 parts' logs come back as one archive, named in the summary" {
	local out="$BATS_TEST_TMPDIR/out" p
	mkdir -p "$out"
	mkdir "$BATS_TEST_TMPDIR/keep"
	cp "$B"/bin/* "$BATS_TEST_TMPDIR/keep/"
	for p in "$B"/bin/*; do cp /bin/true "$p"; done
	OUT="$out" SESSION_SECONDS=120 run --separate-stderr "$B/run.sh" session
	cp "$BATS_TEST_TMPDIR"/keep/* "$B/bin/"
	echo "$output"
	assert_success
	refute_line --partial 'skipped:'
	assert_line --regexp '^logs +9 logs in logs\.tar\.gz$'
	assert_equal "$(ls "$out")" logs.tar.gz
	assert_equal "$(tar -tzf "$out/logs.tar.gz" | sed 's,^\./,,' | sort | paste -sd' ')" \
		"$(printf '%s.log\n' "${SESSION_PARTS[@]}" | sort | paste -sd' ')"
}

# A kernel failing its test on the GPU may fault in the bench too: the
# benches then take the convolutions from cuDNN, and say so (here
# test_cuda_kernels is a stand-in that fails).
@test "run.sh session: a failing kernels_test sends the benches to cuDNN's convolutions, named in the summary" {
	local out="$BATS_TEST_TMPDIR/out"
	mkdir -p "$out"
	cp "$B/bin/test_cuda_kernels" "$B/bin/test_gpu_step" "$B/bin/ddp-check" "$BATS_TEST_TMPDIR/"
	cp /bin/false "$B/bin/test_cuda_kernels"
	# (test_gpu_step and ddp-check, before the benches, stand-ins that
	# pass at once: here their CPU parts would take the seconds the
	# benches are given)
	cp /bin/true "$B/bin/test_gpu_step"
	cp /bin/true "$B/bin/ddp-check"
	OUT="$out" SESSION_SECONDS=25 run --separate-stderr "$B/run.sh" session
	cp "$BATS_TEST_TMPDIR/test_cuda_kernels" "$BATS_TEST_TMPDIR/test_gpu_step" "$BATS_TEST_TMPDIR/ddp-check" "$B/bin/"
	echo "$output"
	assert_success
	assert_line '=== kernels_test failed (rc=1): the benches below run with --conv1 cudnn --conv2 cudnn'
	assert_line --regexp '^kernels_test +rc=1 '
	assert_line --regexp '^fallback +benches with --conv1 cudnn --conv2 cudnn \(kernels_test failed\)$'
	# every bench part that started had the fallback; test_gpu_step not
	local n=0 line
	while read -r line; do
		case $line in
		"=== compile: bench"* | "=== bench_tf32: bench"* | "=== accuracy: bench"*)
			[[ $line == *"CNN_ARGS=--conv1 cudnn --conv2 cudnn"* ]] || fail "no fallback: $line"
			n=$((n + 1)) ;;
		"=== gpu_step: "*) [[ $line != *CNN_ARGS* ]] || fail "fallback on the test: $line" ;;
		esac
	done <<<"$output"
	[ "$n" -ge 1 ]
}

@test "run.sh session: parts that no longer fit are skipped and named, none started" {
	local out="$BATS_TEST_TMPDIR/out"
	mkdir -p "$out"
	OUT="$out" SESSION_SECONDS=5 run --separate-stderr "$B/run.sh" session
	echo "$output"
	assert_success
	local p
	for p in "${SESSION_PARTS[@]}"; do
		assert_line --regexp "^$p +skipped: -?[0-9]+s left$"
	done
	refute_line --partial 'at most'
	assert_equal "$(ls "$out" | wc -l)" 0
}
