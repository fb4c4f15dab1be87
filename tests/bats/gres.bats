#!/usr/bin/env bats
# How Slurm numbers the GPUs it detected, on a real Slurm, and the plan that
# follows it.  slurmd's gres/gpu reads fake_gpus.conf (Slurm's own stand-in
# for AutoDetect=nvml: each GPU's device file and NVML Links) and orders its
# GPU list as AutoDetect does, by Links, which is NVML's PCI bus order.  The
# node is tests/topologies/testnode.xml; a fake NVIDIA driver list says
# /dev/nvidia0 is package 1's 0000:60:00.0 and the others are in bus order,
# as on a DGX H100.  Slurm's GPU k (SLURM_STEP_GPUS) is then the k-th by bus
# id, not /dev/nvidia<k>: gres_order bus, the default.
# bats file_tags=slurm

load helpers

# minor (= fakegpuN, /dev/nvidiaN) -> bus id; NVML index = place in bus order
BUSES=(0000:60:00.0 0000:20:00.0 0000:30:00.0 0000:70:00.0)
LINKS=("0,0,-1,0" "-1,0,0,0" "0,-1,0,0" "0,0,0,-1")

setup_file() {
	local run=${DDP_CLUSTER_DIR:-$REPO/build/cluster} m
	export NV="$BATS_FILE_TMPDIR/gpus"
	: >"$BATS_FILE_TMPDIR/fake_gpus.conf"
	for m in 0 1 2 3; do
		mkdir -p "$NV/${BUSES[$m]}"
		printf 'Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-%d1c2d3e4-d72c-4106-c12f-20bd9faed9f6\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n' \
			"$m" "${BUSES[$m]}" "$m" >"$NV/${BUSES[$m]}/information"
		# <type>|<cpus>|<cpu range>|<links>|<device file>|<unique id>|<flags>
		echo "(null)|4|0-3|${LINKS[$m]}|$run/dev/fakegpu$m|(null)|nvidia_gpu_env" \
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
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|; s|^nvidia_gpus: .*|nvidia_gpus: $NV|" "$CONF"
}

teardown() {
	restore_conf
}

# slurmd's GPU list in its order (slurmd -G): Slurm's GPU k is line k.
slurm_gpu_files() {
	SLURM_CONF="$DIR/etc/slurm.conf" slurmd -G -N node1 2>&1 | sed -n 's/^slurmd: Gres Name=gpu .* File=\([^ ]*\).*/\1/p'
}

# The bus id of Slurm's GPU k: its device file's number is the minor.
slurm_gpu_bus() {
	local files f
	mapfile -t files < <(slurm_gpu_files)
	f=${files[$1]}
	echo "${BUSES[${f##*fakegpu}]}"
}

@test "slurmd numbers the GPUs it detected by NVML's bus order, not by device file" {
	run slurm_gpu_files
	assert_success
	assert_output "$(printf '%s\n' "$DIR/dev/fakegpu1" "$DIR/dev/fakegpu2" "$DIR/dev/fakegpu0" "$DIR/dev/fakegpu3")"
	run --separate-stderr crun srun -N1 -n1 --gres=gpu:2 printenv SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES
	assert_success
	assert_output "$(printf '0,1\n0,1')"
}

@test "gres_order bus: each task runs on one of the GPUs Slurm gave the step, and CUDA opens it" {
	local want0 want1 got
	want0=$(slurm_gpu_bus 0)
	want1=$(slurm_gpu_bus 1)
	[ "$want0" = 0000:20:00.0 ] && [ "$want1" = 0000:30:00.0 ] || fail "Slurm's GPUs 0,1: $want0 $want1"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --partial "SLURM_STEP_GPUS=0,1: Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets CUDA open (gres_order bus)"
	got=$(sed -n 's/^rank=.* busid=\([^ ]*\) .*/\1/p' <<<"$output" | sort | tr '\n' ' ')
	[ "$got" = "$want0 $want1 " ] || fail "the tasks' GPUs: $got, Slurm gave $want0 $want1"
	assert_cuda_opens_planned "$NV"
}

@test "gres_order minor on this node would take /dev/nvidia0,1 for Slurm's GPUs 0,1: other GPUs than Slurm gave" {
	sed -i "s|^gres_order: .*|gres_order: minor|" "$CONF"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	local got
	got=$(sed -n 's/^rank=.* busid=\([^ ]*\) .*/\1/p' <<<"$output" | sort | tr '\n' ' ')
	[ "$got" = "0000:20:00.0 0000:60:00.0 " ] || fail "the tasks' GPUs: $got"
	[ "$got" != "$(slurm_gpu_bus 0) $(slurm_gpu_bus 1) " ] || fail "minor order agrees with Slurm's here"
}
