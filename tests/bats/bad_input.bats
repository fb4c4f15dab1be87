#!/usr/bin/env bats
# Bad --ddp values are rejected at submit time, on the login node.
# bats file_tags=slurm

load helpers

cluster_file 1

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "built for Slurm 25.05 or later, the plugin declares ESPANK_JOB_FAILURE: a failing init fails the job, never drains the node" {
	local v major minor
	v=$("$REPO/build/bin/ddp-env" --version)
	v=${v##*Slurm }
	major=${v%%.*}
	minor=$(echo "$v" | cut -d. -f2)
	run nm -D --defined-only "$REPO/build/lib/spank_ddp.so"
	assert_success
	if [ $((10#$major * 100 + 10#$minor)) -lt 2505 ]; then
		# (slurmstepd before 25.05 reads no such symbol)
		refute_output --partial slurm_spank_init_failure_mode
		return
	fi
	assert_line --regexp ' [DdBb] slurm_spank_init_failure_mode$'
	run gdb -batch -ex 'print slurm_spank_init_failure_mode == ESPANK_JOB_FAILURE' "$REPO/build/lib/spank_ddp.so"
	assert_output --partial '= 1'
}

@test "srun --ddp=foo fails before the job starts, naming the value and the valid ones" {
	run --separate-stderr crun srun --ddp=foo true
	assert_failure
	assert_equal "$stderr" "$(printf '%s\n' "$stderr" | head -n 2)"
	[[ "$stderr" == *"ddp: --ddp=foo: unknown backend (expected nccl, gloo or auto)"* ]]
	run crun squeue -h
	assert_output ""
}

@test "srun --ddp= (empty) fails at submit" {
	run --separate-stderr crun srun --ddp= true
	assert_failure
	[[ "$stderr" == *"ddp: --ddp=: empty backend (expected nccl, gloo or auto)"* ]]
}

@test "sbatch --ddp=foo is refused and nothing is queued" {
	run --separate-stderr crun sbatch --ddp=foo --wrap true
	assert_failure
	[[ "$stderr" == *"--ddp=foo: unknown backend"* ]]
	run crun squeue -h
	assert_output ""
}

@test "#SBATCH --ddp=NCCL (wrong case) is refused" {
	printf '#!/bin/bash\n#SBATCH --ddp=NCCL\ntrue\n' >"$BATS_TEST_TMPDIR/j.sh"
	run --separate-stderr crun sbatch "$BATS_TEST_TMPDIR/j.sh"
	assert_failure
	[[ "$stderr" == *"--ddp=NCCL: unknown backend (expected nccl, gloo or auto)"* ]]
}

@test "salloc --ddp=foo is refused" {
	run --separate-stderr crun salloc --ddp=foo true
	assert_failure
	[[ "$stderr" == *"--ddp=foo: unknown backend"* ]]
}

@test "srun --help lists --ddp" {
	run --separate-stderr crun srun --help
	assert_success
	assert_output --partial "--ddp=[nccl|gloo|auto]"
}

@test "ddp-env outside a step says why, exit 1" {
	run --separate-stderr env -i PATH=/usr/bin:/bin "$REPO/build/bin/ddp-env"
	assert_failure 1
	[[ "$stderr" == "ddp-env: SLURM_JOB_ID is not set: not inside a Slurm step?" ]]
}

@test "ddp-env --backend=bad is a usage error, exit 2" {
	run --separate-stderr "$REPO/build/bin/ddp-env" --backend=bad
	assert_failure 2
	[[ "$stderr" == *"--ddp=bad: unknown backend"* ]]
}

@test "ddp-env's plan options refuse bad input, naming it (no crash)" {
	local T="$REPO/tests/topologies/dgx-h100.xml"
	run --separate-stderr "$REPO/build/bin/ddp-env" --tasks abc
	assert_failure 2
	[[ "$stderr" == "ddp-env: --tasks=abc: expected a task count 1-1024" ]]
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --gpus 0,,1
	assert_failure 1
	[[ "$stderr" == *"SLURM_STEP_GPUS=0,,1: an empty entry"* ]]
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology /etc/passwd
	assert_failure 1
	# (hwloc 2.15 says why in a line of its own first)
	assert_equal "$(grep -c '^ddp-env: topology /etc/passwd: cannot be read as an hwloc XML file (lstopo --of xml)' <<<"$stderr")" 1
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --bind=closest
	assert_failure 2
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --tasks 5000
	assert_failure 1
	[[ "$stderr" == *"5000 tasks on node 0: expected 1-1024"* ]]
}

@test "ddp-env --nvidia-gpus, --gres-order: Slurm's GPU k in bus order, or /dev/nvidiaN at the driver's bus id; a bad list or order is named" {
	local T="$REPO/tests/topologies/dgx-h100.xml" NV="$BATS_TEST_TMPDIR/gpus" m=0 bus
	# the driver numbered socket 1's 0000:9d:00.0 first
	for bus in 0000:9d:00.0 0000:1b:00.0; do
		mkdir -p "$NV/$bus"
		printf 'Model: \t\t NVIDIA H100\nBus Location: \t %s\nDevice Minor: \t %d\n' "$bus" $m >"$NV/$bus/information"
		m=$((m + 1))
	done
	# bus order (AutoDetect=nvml), the default: GPU 0 is the first by bus id, Slurm's numbers stand
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --tasks 2 --gpus 0,1
	assert_success
	assert_line "# gpu: bound: SLURM_STEP_GPUS=0,1: Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets CUDA open (gres_order bus)"
	assert_line "# CUDA_VISIBLE_DEVICES=0,1 for every task"
	assert_output --regexp "# 0 +0 0000:1b:00.0 "
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --gres-order pci --tasks 2
	assert_failure 2
	[[ "$stderr" == *"--gres-order='pci': expected bus (AutoDetect=nvml, or a gres.conf listing the GPUs in PCI bus order) or minor"* ]]
	# minor order (File=/dev/nvidia[0-1]): CUDA counts in bus order, /dev/nvidia0 is its GPU 1
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --gres-order minor --tasks 2 --gpus 0,1
	echo "$output"
	assert_success
	assert_line "# gpu: bound: SLURM_STEP_GPUS=0,1: gres_order minor, and the NVIDIA driver numbered /dev/nvidiaN out of bus order; CUDA numbers /dev/nvidia0 1, /dev/nvidia1 0"
	assert_line "# CUDA_VISIBLE_DEVICES=1,0 for every task"
	assert_output --regexp "
# 0 +0 0000:9d:00.0 +1 mlx5_4 +56-111,168-223 .*near its GPU
# 1 +1 0000:1b:00.0 +0 mlx5_0 +0-55,112-167 .*near its GPU"
	# a third GPU: CUDA's count for Slurm's 0,1 depends on ConstrainDevices; UUIDs name them
	mkdir -p "$NV/0000:43:00.0"
	printf 'Bus Location: \t 0000:43:00.0\nDevice Minor: \t 2\n' >"$NV/0000:43:00.0/information"
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --gres-order minor --tasks 2 --gpus 0,1
	assert_success
	assert_line --partial "and the driver gives no UUIDs (GPUs not initialised: persistence mode off?): CUDA may take Slurm's numbers"
	m=0
	for bus in 0000:9d:00.0 0000:1b:00.0 0000:43:00.0; do
		printf 'GPU UUID: \t GPU-%d932f937-d72c-4106-c12f-20bd9faed9f6\n' $m >>"$NV/$bus/information"
		m=$((m + 1))
	done
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --gres-order minor --tasks 2 --gpus 0,1
	assert_success
	assert_line --partial "Slurm's numbers can mean either count: CUDA_VISIBLE_DEVICES names them by UUID"
	assert_line "# CUDA_VISIBLE_DEVICES=GPU-0932f937,GPU-1932f937 for every task"
	# without the list GPU 0 is the first by bus id
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --tasks 2 --gpus 0,1
	assert_output --regexp "# 0 +0 0000:1b:00.0 "
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$BATS_TEST_TMPDIR/none" --tasks 2
	assert_failure 2
	[[ "$stderr" == *"--nvidia-gpus=$BATS_TEST_TMPDIR/none: no GPU listed there"* ]]
	printf 'Device Minor: \t zero\n' >"$NV/0000:1b:00.0/information"
	run --separate-stderr "$REPO/build/bin/ddp-env" --topology "$T" --nvidia-gpus "$NV" --tasks 2
	assert_failure 2
	[[ "$stderr" == *"0000:1b:00.0/information: Device Minor 'zero': expected 0-255" ]]
}
