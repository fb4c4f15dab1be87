#!/usr/bin/env bats
# scripts/gpu-bundle.sh: what a lent GPU machine runs (it has CUDA but no
# Debian packages and no network).  A GPU session has 30 minutes of device
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
	[ -f "$B/lib.tar.xz" ] && [ -x "$B/run.sh" ]
	[ "$(ls "$B"/data/*-ubyte.gz | wc -l)" -eq 4 ]
	# CUDA's own libraries are the machine's, named for run.sh to find
	grep -qx 'libcudnn.so.9' "$B/cuda-libs"
	grep -qx 'libnccl.so.2' "$B/cuda-libs"
	! tar -tJf "$B/lib.tar.xz" | grep -E 'libcudnn|libnccl|libcublas|libcudart|libcuda\.so'
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
	assert_line --regexp '^# GPU: cuemu .*, fp32, conv1 direct, NCHW, CUDA graph$'
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(16 images\)$'
	assert_line --regexp '^done: 8 steps, '
}

@test "run.sh gloo2: two ranks on the one GPU over gloo agree (cuemu's module)" {
	[ -f "$EMU" ] || skip "no cuemu GPU module ($EMU)"
	GPU_BUNDLE_MODULE="$EMU" run --separate-stderr "$B/run.sh" gloo2 "${SMALL[@]}" --max-steps 4
	echo "$stderr"
	assert_success
	assert_line --regexp '^# cnn_train: world 2 \(gloo\), '
	assert_line --regexp '^# GPU: cuemu .*, no graph \(gradients all-reduced through host memory\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^done: 4 steps, '
}
