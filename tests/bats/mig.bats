#!/usr/bin/env bats
# MIG devices on a real Slurm.  slurmd's gres/gpu reads fake_gpus.conf
# (Slurm's stand-in for AutoDetect=nvml), whose unique-id field is what
# NVML gives a MIG device: Slurm then names the step's GPUs by it in
# CUDA_VISIBLE_DEVICES, the same list for every task.  CUDA opens only the
# first MIG device it is shown, so without srun --ddp every task of the
# step lands on one; with it each task sees its own, and --ddp=auto takes
# gloo (NCCL does not run ranks on MIG devices).
# bats file_tags=slurm

load helpers

MIGS=(MIG-0a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d MIG-1a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d
	MIG-2a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d MIG-3a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d)

setup_file() {
	local run=${DDP_CLUSTER_DIR:-$REPO/build/cluster} m
	: >"$BATS_FILE_TMPDIR/fake_gpus.conf"
	for m in 0 1 2 3; do
		# <type>|<cpus>|<cpu range>|<links>|<device file>|<unique id>|<flags>
		echo "1g.10gb|4|0-3|-1|$run/dev/fakegpu$m|${MIGS[$m]}|nvidia_gpu_env" \
			>>"$BATS_FILE_TMPDIR/fake_gpus.conf"
	done
	DDP_FAKE_GPUS="$BATS_FILE_TMPDIR/fake_gpus.conf" cluster_start 1
}

teardown_file() {
	cluster_stop
}

setup() {
	as_user # the jobs are the unprivileged user's
	cluster_paths
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$CONF"
}

teardown() {
	restore_conf
}

@test "Slurm names MIG GRES by UUID, the same list for every task" {
	run --separate-stderr crun srun -N1 -n2 --gres=gpu:2 bash -c 'echo "$SLURM_STEP_GPUS $CUDA_VISIBLE_DEVICES"'
	assert_success
	assert_output "$(printf '0,1 %s,%s\n0,1 %s,%s' "${MIGS[0]}" "${MIGS[1]}" "${MIGS[0]}" "${MIGS[1]}")"
}

@test "srun --ddp: each task sees its own MIG device, as ddp-env --explain planned, over gloo" {
	run --separate-stderr crun srun --ddp -N1 -n2 --gres=gpu:2 bash -c \
		'echo "backend=$DDP_BACKEND slurm=$DDP_SLURM_CUDA_VISIBLE_DEVICES"; exec "$0"' "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --regexp "^rank=0 local=0 .* cvd=${MIGS[0]} plan_cvd=${MIGS[0]} "
	assert_line --regexp "^rank=1 local=1 .* cvd=${MIGS[1]} plan_cvd=${MIGS[1]} "
	assert_line "backend=gloo slurm=${MIGS[0]},${MIGS[1]}"
	assert_line --partial "# gpu: bound: SLURM_STEP_GPUS=0,1, CUDA_VISIBLE_DEVICES=${MIGS[0]},...: MIG devices: each task sees only its own"
	assert_line --partial "# cpu: bound: tasks spread evenly over packages, NUMA nodes and cores"
	refute_output --partial "busid=0000"
	# The plugin's reason, in the task (a bare --ddp is not in its environment).
	run --separate-stderr crun srun --ddp -N1 -n1 --gres=gpu:1 "$REPO/build/bin/ddp-env" --explain
	assert_success
	assert_line --regexp "^DDP_BACKEND +gloo +--ddp=auto: the step's GPUs are MIG devices, on which NCCL does not run ranks$"
}

@test "ddp-check on MIG devices: each task on its own is all OK; without --ddp it names the shared one" {
	run --separate-stderr crun srun --ddp -N1 -n2 --gres=gpu:2 "$REPO/build/bin/ddp-check" -e 4K
	assert_success
	assert_line --regexp "^OK +bind\.gpus +each of 2 MIG devices is used by exactly one task"
	assert_line --regexp "^OK +bind\.visible +every task sees its own MIG device only"
	assert_line --regexp "^SKIP +bind\.locality +the tasks' GPUs are MIG devices"
	assert_line --regexp "  0  node1 .* ${MIGS[0]} "
	assert_line --regexp "^ddp-check: [0-9]+ checks OK, 0 WARN, 0 FAILED"

	# Slurm's own binding: both tasks shown both, CUDA opens the first.
	run --separate-stderr crun srun -N1 -n2 --gres=gpu:2 bash -c \
		'MASTER_ADDR=$(ip -4 -o addr show enp1s0 | awk "{print \$4}" | cut -d/ -f1) MASTER_PORT=29777 WORLD_SIZE=2 RANK=$SLURM_PROCID \
		 LOCAL_RANK=$SLURM_LOCALID LOCAL_WORLD_SIZE=2 NODE_RANK=0 GLOO_SOCKET_IFNAME=enp1s0 \
		 exec "$0" -e 4K --backend gloo' "$REPO/build/bin/ddp-check"
	assert_line --regexp "^WARN +bind\.gpus +node1: MIG device ${MIGS[0]} is used by tasks 0 and 1 \(CUDA opens the first MIG device"
	assert_line --regexp "^WARN +bind\.visible +task 0 \(node1\) is shown 2 MIG devices"
}

@test "--ddp=nccl on MIG devices is the user's choice, with a warning naming NCCL's failure" {
	run --separate-stderr crun srun --ddp=nccl -N1 -n2 --gres=gpu:2 printenv DDP_BACKEND
	assert_success
	assert_output "$(printf 'nccl\nnccl')"
	[[ "$stderr" == *"ddp: warning: --ddp=nccl on MIG devices: NCCL does not support MIG (NVIDIA/nccl#1716), and 2 ranks on MIG devices of one GPU fail with \"Duplicate GPU detected\"; use --ddp=gloo, or one task per node"* ]] ||
		fail "no warning: $stderr"
	[ "$(grep -c 'ddp: warning' <<<"$stderr")" = 1 ] || fail "said more than once: $stderr"
	run --separate-stderr crun srun --ddp=nccl -N1 -n1 --gres=gpu:1 printenv DDP_BACKEND
	assert_success
	[[ "$stderr" != *"ddp: warning"* ]] || fail "warned for one rank: $stderr"
}
