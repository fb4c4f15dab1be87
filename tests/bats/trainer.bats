#!/usr/bin/env bats
# cnn_train on the real test cluster under srun --ddp=gloo: nothing else set.
# A rank killed mid-run makes the others exit naming it; a cancelled job
# resumes from its checkpoint.
# bats file_tags=slurm,trainer

load helpers
plain_data
# Bats arms a test's timer before its body runs: the bound is set here, for
# every test of the file. Cnn_train runs of 4 ranks on the 2 cores, and a requeue, take minutes.
BATS_TEST_TIMEOUT=300

CNN="$REPO/build/bin/cnn_train"

cluster_file 2

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "srun -N2 --ntasks-per-node=2 --ddp=gloo cnn_train: 4 ranks train and agree" {
	run --separate-stderr crun srun -N2 --ntasks-per-node=2 -c1 --ddp=gloo "$CNN" \
		--max-steps 30 --train-limit 7680 --eval --test-limit 2000 --progress lines --log-every 10 \
		--log-json "$BATS_TEST_TMPDIR/s.json"
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	assert_line --regexp '^# cnn_train: world 4 \(gloo\), model 1x28x28->10'
	assert_line --regexp '^epoch 1/2 step 30/30 loss [0-9.]+ images/s [0-9]+$'
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(2000 images\)$'
	assert_line --regexp '^params: identical on all 4 ranks'
	# the time breakdown has one line per rank
	[ "$(printf '%s\n' "$output" | grep -cE '^ +[0-3] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$')" -eq 4 ]
	run /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["world_size"] == 4 and d["backend"] == "gloo" and 0.3 < d["test_accuracy"] <= 1, d' "$BATS_TEST_TMPDIR/s.json"
	assert_success
}

@test "a rank killed mid-run: the others exit within the timeout, naming it" {
	local d="$BATS_TEST_TMPDIR"
	# Each task records its pid; the whole run would take minutes.
	# (set -e holds in the subshell: the status is recorded either way)
	( if crun srun -N2 --ntasks-per-node=2 -c1 --ddp=gloo bash -c \
		'echo $$ > '"$d"'/pid.$SLURM_PROCID; exec '"$CNN"' --epochs 5 --timeout 20 --progress lines --log-every 5' \
		>"$d/out" 2>"$d/err" 3>&-; then echo 0 >"$d/rc"; else echo $? >"$d/rc"; fi ) 3>&- &
	local i
	for ((i = 0; i < 600; i++)); do
		grep -q '^epoch 1/5 step 10/' "$d/out" 2>/dev/null && break
		sleep 0.2
	done
	grep -q '^epoch 1/5 step 10/' "$d/out" || { cat "$d/out" "$d/err"; false; }
	local t0=$SECONDS
	kill -KILL "$(cat "$d/pid.3")"
	for ((i = 0; i < 600; i++)); do
		[ -f "$d/rc" ] && break
		sleep 0.2
	done
	cat "$d/err"
	[ -f "$d/rc" ]
	[ "$(cat "$d/rc")" -ne 0 ]
	# within the 20 s collective timeout (plus slack for srun's own teardown)
	[ $((SECONDS - t0)) -le 40 ]
	# survivors name rank 3 and its node, and no survivor is called dead
	grep -E 'cnn_train: node[12] rank [012]: rank 3 \(node2\) died' "$d/err"
	! grep -E 'died;.*|ranks? [012] \(node' "$d/err" | grep -E 'ranks? [012] \(node' || false
	! grep -E 'cnn_train: .* rank 3:' "$d/err" || false
}

@test "a cancelled job resumes from its checkpoint" {
	local d="$BATS_TEST_TMPDIR" ck="$BATS_TEST_TMPDIR/ck"
	# 100 steps: the job is cancelled at its first checkpoint (step 10)
	local opts=(--epochs 2 --train-limit 6400 --test-limit 1000 --checkpoint-dir "$ck" --checkpoint-every 10 --progress lines --log-every 10)
	run crun sbatch --parsable -N2 --ntasks-per-node=1 --ddp=gloo -o "$d/job.out" \
		-c1 --wrap "srun $CNN ${opts[*]}"
	assert_success
	local job=$output i
	for ((i = 0; i < 600; i++)); do
		[ -f "$ck/checkpoint.bin" ] && break
		sleep 0.2
	done
	[ -f "$ck/checkpoint.bin" ] || { cat "$d/job.out"; false; }
	crun scancel "$job"
	for ((i = 0; i < 150; i++)); do
		crun squeue -h -j "$job" 2>/dev/null | grep -q . || break
		sleep 0.2
	done
	run --separate-stderr crun srun -N2 --ntasks-per-node=1 -c1 --ddp=gloo "$CNN" "${opts[@]}" --resume
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	assert_line --regexp "^# resumed from $ck/checkpoint.bin: epoch [12], step [0-9]+ of it, [1-9][0-9]* steps done$"
	assert_line --regexp '^done: 100 steps'
}

# The GPU path under Slurm where no GPU is: the GPU module built on cuemu
# (gpu_emu.bats has the rest).  Two ranks on two nodes over gloo, each
# with its "GPU", all-reduce the gradients through host memory: what a bare
# --ddp does on MIG devices and shared GPUs.  In fp32 they train what two
# CPU ranks train: measured mean |difference| 1.8e-8, the largest 1.7e-4
# (params_within says why the mean), allowed 1e-7.  Each rank's batches,
# its test images' too, are of 8: one batch size, its layout by cudnnFind's
# totals (no graph to time the layouts in).
@test "srun -N2 --ddp=gloo cnn_train --device cuda (cuemu): two GPU ranks train what two CPU ranks train" {
	local emu="$REPO/build/tests/cuemu/cnn_train_cuda_emu.so"
	[ -f "$emu" ] || skip "no cuemu GPU module ($emu): CUDA's headers are missing here (see tests/Makefile)"
	local opts=(--train-limit 64 --test-limit 16 --batch-size 8 --max-steps 8 --progress lines --log-every 1000)
	CNN_TRAIN_CUDA_MODULE="$emu" run --separate-stderr crun srun -N2 --ntasks-per-node=1 -c1 --ddp=gloo "$CNN" \
		"${opts[@]}" --device cuda --precision fp32 --conv1 direct --dump-params "$BATS_TEST_TMPDIR/gpu.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# cnn_train: world 2 \(gloo\), model 1x28x28->10'
	assert_line --regexp '^# GPU: cuemu .*, fp32, conv1 direct, batch 8 cuDNN: conv2 forward [A-Z0-9_]+ .*, batch 8 fc2 (fused|cuBLAS) .*, batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\), no graph \(gradients all-reduced through host memory\), backward streams auto: 1 \(no graph to time both ways\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^done: 8 steps, '
	run --separate-stderr crun srun -N2 --ntasks-per-node=1 -c1 --ddp=gloo "$CNN" "${opts[@]}" --device cpu \
		--dump-params "$BATS_TEST_TMPDIR/cpu.bin"
	assert_success
	params_within "$BATS_TEST_TMPDIR/cpu.bin" "$BATS_TEST_TMPDIR/gpu.bin" 1e-7
}

# --ddp=nccl with a GPU per task on two nodes: the plugin's variables take
# cnn_train to the GPU module and NCCL, whose bootstrap (cuemu's, as
# NCCL's) listens on the address of the interface NCCL_SOCKET_IFNAME names,
# which the plugin chose per node (enp1s0 on one, enp2s0 on the other).
@test "srun -N2 --gpus-per-node=1 --ddp=nccl cnn_train --device cuda (cuemu): two ranks over NCCL as the plugin set it" {
	local emu="$REPO/build/tests/cuemu/cnn_train_cuda_emu.so"
	[ -f "$emu" ] || skip "no cuemu GPU module ($emu): CUDA's headers are missing here (see tests/Makefile)"
	CNN_TRAIN_CUDA_MODULE="$emu" run --separate-stderr crun srun -N2 --ntasks-per-node=1 --gpus-per-node=1 -c1 \
		--ddp=nccl "$CNN" --train-limit 128 --test-limit 32 --batch-size 8 --epochs 1 --progress lines --log-every 4 \
		--device cuda --precision fp32
	echo "$stderr"
	assert_success
	assert_line --regexp '^# cnn_train: world 2 \(nccl\), model 1x28x28->10'
	# --conv1 auto timed both ways at the training batch and at the
	# evaluation's, the rank's 16 test images (not 256); --conv-layout
	# auto: each batch size's layout, the training batch's step timed in both
	assert_line --regexp '^# GPU: cuemu .*, fp32, batch 8 conv1 forward (direct|cuDNN) [0-9.]+ ms .*, batch 16 conv1 forward (direct|cuDNN) [0-9.]+ ms .*, batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms; the step.s graph timed in each layout at its capture\), batch 16 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\), CUDA graph, backward streams auto \(1 or 2: the step.s graph timed both ways\), programmatic launch auto \(the step.s graph timed with and without\)$'
	assert_line --regexp '^epoch 1/1 step 8/8 loss [0-9.]+ images/s [0-9]+$'
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(32 images\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^done: 8 steps, '
}
