#!/usr/bin/env bats
# GPU, CPU and memory binding on a real 2-node Slurm.  The nodes share this
# machine's 2 cores and have 4 fake GPUs each (GRES device files without
# hardware), so the GPU locality tests tell the plugin the nodes' shape
# with ddp.yaml `topology:` (tests/topologies/testnode.xml: the 2 real CPUs
# as two packages, two GPUs behind each).  Every task compares what it got
# (Cpus_allowed_list, CUDA_VISIBLE_DEVICES, DDP_GPU_BUSID) with what
# `ddp-env --explain` planned for its local rank (tests/bats/bind_report.sh).
# bats file_tags=slurm

load helpers

cluster_file 2

setup() {
	as_user # the jobs are the unprivileged user's
	cluster_paths
}

teardown() {
	restore_conf
}

@test "auto with GPUs: each task gets the cores near its GPU and the permuted GPU list, as --explain planned" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo -N2 --ntasks-per-node=2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_matches_plan 4
	# 2 tasks, 4 GPUs (2 per package): one GPU behind each package, all 4 visible
	assert_line --regexp '^rank=[02] local=0 cpus=0 .* cvd=0,2,1,3 .* busid=0000:20:00.0 '
	assert_line --regexp '^rank=[13] local=1 cpus=1 .* cvd=0,2,1,3 .* busid=0000:60:00.0 '
	assert_line --partial "# cpu: bound: the cores near each task's GPU, split evenly"
	assert_line --partial "# gpu: bound: SLURM_STEP_GPUS=0,1,2,3: GRES index k is the k-th GPU by PCI bus id"
}

@test "auto with 4 tasks on 4 GPUs: every GPU once, tasks behind one package share its core" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo -N1 -n4 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_matches_plan 4
	assert_line --regexp '^rank=0 local=0 cpus=0 .* cvd=0,1,2,3 .* busid=0000:20:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=0 .* busid=0000:30:00.0 '
	assert_line --regexp '^rank=2 local=2 cpus=1 .* busid=0000:60:00.0 '
	assert_line --regexp '^rank=3 local=3 cpus=1 .* busid=0000:70:00.0 '
	assert_line --partial "fewer CPUs than tasks: some share"
}

@test "CPU-only on this machine's own topology: one core each, OMP_NUM_THREADS follows" {
	run --separate-stderr crun srun --ddp=gloo -N2 --ntasks-per-node=2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 4
	assert_line --regexp '^rank=[02] local=0 cpus=0 .* omp=1$'
	assert_line --regexp '^rank=[13] local=1 cpus=1 .* omp=1$'
	assert_line --partial "topology this machine (hwloc)"
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 .* omp=2$'
}

@test "--ddp-bind=none leaves CPUs and GPUs to Slurm and says so" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo --ddp-bind=none -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 plan_cpus=\(left cvd=0,1,2,3 plan_cvd=none busid=unset'
	assert_line --regexp '^rank=1 local=1 cpus=0-1 plan_cpus=\(left cvd=0,1,2,3 '
	assert_line --partial "# binding: --ddp-bind=none (--ddp-bind)"
	assert_line --partial "# cpu: --ddp-bind=none: left to Slurm and the user"
	assert_line --partial "# gpu: --ddp-bind=none: left to Slurm and the user"
}

@test "DDP_BIND=none in the job's environment does the same" {
	testnode_topology
	run --separate-stderr crun env DDP_BIND=none srun --ddp=gloo -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 plan_cpus=\(left cvd=0,1,2,3 '
	assert_line --partial "--ddp-bind=none (DDP_BIND (the job's environment))"
}

@test "an explicit --cpu-bind is left alone (GPUs are still ordered), and --explain says so" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo --cpu-bind=cores -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 plan_cpus=\(left cvd=0,2,1,3 plan_cvd=0,2,1,3 '
	assert_line --regexp '^rank=1 local=1 cpus=0-1 .* cvd=0,2,1,3 '
	assert_line --partial "# cpu: explicit --cpu-bind (DDP_SLURM_CPU_BIND=quiet,cores"
	assert_line --partial "# mem: CPUs left alone, so memory too"
}

@test "a --cpu-bind longer than 4 KiB (as task/affinity writes for many tasks of a big node) runs, left alone" {
	local list
	list=$(printf '0,1,%.0s' $(seq 1 1100))
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --cpu-bind="map_cpu:${list%,}" "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 plan_cpus=\(left '
	assert_line --partial "# cpu: explicit --cpu-bind (DDP_SLURM_CPU_BIND=quiet,map_cpu:0,1,0,1,"
}

@test "gres_order minor (this cluster's hand-written gres.conf) and a driver that numbered GPUs out of bus order: each task's CUDA_VISIBLE_DEVICES names its GPU as CUDA counts" {
	testnode_topology
	sed -i "s|^gres_order: .*|gres_order: minor|" "$CONF"
	grep -q "^gres_order: minor" "$CONF"
	local NV="$BATS_TEST_TMPDIR/gpus" m=0 bus
	# /dev/nvidia0 is package 1's 0000:60:00.0, the others in bus order
	for bus in 0000:60:00.0 0000:20:00.0 0000:30:00.0 0000:70:00.0; do
		mkdir -p "$NV/$bus"
		printf 'Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-%d1c2d3e4-d72c-4106-c12f-20bd9faed9f6\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n' \
			$m "$bus" $m >"$NV/$bus/information"
		m=$((m + 1))
	done
	sed -i "s|^nvidia_gpus: .*|nvidia_gpus: $NV|" "$CONF"
	grep -q "^nvidia_gpus: $NV" "$CONF"
	# /dev/nvidia0,1: Slurm's 0,1 would be 0000:20 and 0000:30 to CUDA
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --partial "Slurm's numbers can mean either count: CUDA_VISIBLE_DEVICES names them by UUID"
	assert_line --regexp '^rank=[01] local=[01] cpus=1 .* cvd=GPU-01c2d3e4,GPU-11c2d3e4|GPU-11c2d3e4,GPU-01c2d3e4 .* busid=0000:60:00.0 '
	assert_cuda_opens_planned "$NV"
	# the whole node: CUDA's numbers
	run --separate-stderr crun srun --ddp=gloo -N1 -n4 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_matches_plan 4
	assert_line --partial "CUDA numbers /dev/nvidia0 2, /dev/nvidia1 0, /dev/nvidia2 1, /dev/nvidia3 3"
	assert_cuda_opens_planned "$NV"
	# gres_order bus (AutoDetect=nvml): Slurm's GPU k is the k-th by bus id,
	# as CUDA counts: its numbers stand
	sed -i "s|^gres_order: .*|gres_order: bus|" "$CONF"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --partial "Slurm's GPU k is the k-th by PCI bus id of the GPUs the NVIDIA driver lets CUDA open (gres_order bus)"
	assert_line --regexp '^rank=[01] local=[01] cpus=0 .* cvd=(0,1|1,0) .* busid=0000:20:00.0 '
	assert_cuda_opens_planned "$NV"
	# minor order without the driver's list (nvidia_gpus: ""): said, and bus order taken
	sed -i "s|^gres_order: .*|gres_order: minor|; s|^nvidia_gpus: .*|nvidia_gpus: \"\"|" "$CONF"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --partial "gres_order minor needs the NVIDIA driver's GPU list, which is not read here: GRES index k taken for the k-th GPU by PCI bus id"
}

@test "an explicit --gpu-bind is left alone (CPUs are still bound), and --explain says so" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo --gpu-bind=closest -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --regexp '^rank=0 local=0 cpus=0 plan_cpus=0 cvd=0,1,2,3 plan_cvd=none busid=unset'
	# (Slurm 24.11 writes the GRES as gres/gpu, 22.05 as gpu)
	assert_line --regexp "# gpu: Slurm binds GPUs per task \(--gpu-bind, or --ntasks-per-gpu\) \(SLURMD_TRES_BIND=(gres/)?gpu:closest\): left to Slurm"
}

@test "--gpus-per-task=1: Slurm's per-task GPUs stay, each task's CPUs follow its GPU as --explain planned, NCCL is warned once per node" {
	testnode_topology
	# Another job holds node1's GPUs 0,1 (package 0): there the step gets
	# 2,3 (package 1), on node2 0,1; Slurm gives task i the i-th.
	hold_job -w node1 --gres=gpu:2
	run --separate-stderr crun srun --ddp=nccl -N2 --ntasks-per-node=2 --gpus-per-task=1 -w node1,node2 "$BIND_REPORT"
	crun scancel "$HOLDER"
	assert_success
	assert_matches_plan 4
	# ddp-env --explain works in each task (no "has 1 GPU(s)" from the task's own list)
	refute_line --regexp 'plan_cpus=none'
	assert_line --regexp '^rank=0 local=0 cpus=1 plan_cpus=1 cvd=2 plan_cvd=none busid=0000:60:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=1 plan_cpus=1 cvd=3 plan_cvd=none busid=0000:70:00.0 '
	assert_line --regexp '^rank=2 local=0 cpus=0 plan_cpus=0 cvd=0 plan_cvd=none busid=0000:20:00.0 '
	assert_line --regexp '^rank=3 local=1 cpus=0 plan_cpus=0 cvd=1 plan_cvd=none busid=0000:30:00.0 '
	assert_line --partial "# gpu: Slurm binds each task to its own 1 GPU (gpu:per_task:1; --gpus-per-task or --gpu-bind): each sees only it, from cuda:0, not cuda:LOCAL_RANK"
	assert_line --partial "# cpu: bound: the cores near each task's GPU, split evenly (Slurm's pick of its GPU)"
	assert_equal "$(grep -c 'warning: Slurm binds each of this node.s 2 tasks to its own GPU' <<<"$stderr")" 2
	grep -q -- '--gpus-per-node=2 (or --gres=gpu:2) with --ntasks-per-node=2 and no --gpu-bind keeps every GPU visible' <<<"$stderr"
}

@test "--gpus-per-task=2 under gloo: each task's two GPUs, its CPUs near the first, no warning" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gpus-per-task=2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --regexp '^rank=0 local=0 cpus=0 plan_cpus=0 cvd=0,1 plan_cvd=none busid=0000:20:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=1 plan_cpus=1 cvd=2,3 plan_cvd=none busid=0000:60:00.0 '
	refute [ "$(grep -c 'warning' <<<"$stderr")" -gt 0 ]
}

@test "--gpu-bind=map_gpu: each task keeps Slurm's GPU (an entry outside the step falls back to its first), its CPUs follow it, --explain says which" {
	testnode_topology
	# Another job holds node1's GPUs 0,1: the step gets 2,3.  map_gpu
	# numbers are the node's: 3 is the step's, 1 is not, so Slurm binds
	# task 1 to the step's first (2); task 2 starts the list over.
	hold_job -w node1 --gres=gpu:2
	run --separate-stderr crun srun --ddp=gloo -w node1 -n3 --gres=gpu:2 --gpu-bind=map_gpu:3,1 "$BIND_REPORT"
	crun scancel "$HOLDER"
	assert_success
	assert_matches_plan 3
	refute_line --regexp 'plan_cpus=none'
	assert_line --regexp '^rank=0 local=0 cpus=1 plan_cpus=1 cvd=3 plan_cvd=none busid=0000:70:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=1 plan_cpus=1 cvd=2 plan_cvd=none busid=0000:60:00.0 '
	assert_line --regexp '^rank=2 local=2 cpus=1 plan_cpus=1 cvd=3 plan_cvd=none busid=0000:70:00.0 '
	assert_line --partial "# gpu: Slurm binds each task to its --gpu-bind=map_gpu:3,1 entry: each sees only its GPU, as cuda:0 (not cuda:LOCAL_RANK)"
	assert_line --partial "; task 1's entry names none of the step's GPUs (2,3): Slurm gives it 2; tasks 0 and 2 share GPU 3: NCCL refuses two ranks on one GPU"
	assert_line --partial "# cpu: bound: the cores near each task's GPU, split evenly (Slurm's pick of its GPU)"
}

@test "--gpu-bind=mask_gpu under NCCL: each task's GPUs stay Slurm's, its CPUs near the first, NCCL warned once" {
	testnode_topology
	run --separate-stderr crun srun --ddp=nccl -w node2 -n2 --gres=gpu:4 --gpu-bind=mask_gpu:0xc,0x3 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	assert_line --regexp '^rank=0 local=0 cpus=1 plan_cpus=1 cvd=2,3 plan_cvd=none busid=0000:60:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=0 plan_cpus=0 cvd=0,1 plan_cvd=none busid=0000:20:00.0 '
	assert_line --partial "# gpu: Slurm binds each task to its --gpu-bind=mask_gpu:0xc,0x3 entry: each sees only its GPUs"
	assert_equal "$(grep -c -E 'warning: Slurm binds each of this node.s 2 tasks to its own GPU \(SLURMD_TRES_BIND=(gres/)?gpu:mask_gpu:0xc,0x3, from --gpu-bind\)' <<<"$stderr")" 1
}

@test "--ddp-bind=strict: each task sees only its own GPU" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo --ddp-bind=strict -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0 plan_cpus=0 cvd=0 .* busid=0000:20:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=1 plan_cpus=1 cvd=2 .* busid=0000:60:00.0 '
	assert_line --partial "--ddp-bind=strict: each task sees its GPU only"
}

@test "#SBATCH --ddp-bind reaches the job's steps" {
	testnode_topology
	local out="$BATS_TEST_TMPDIR/out"
	run sbatch_wait -N1 -n2 --gres=gpu:4 --ddp=gloo --ddp-bind=strict -o "$out" \
		--wrap "srun $BIND_REPORT"
	assert_success
	run cat "$out"
	assert_line --regexp '^rank=1 local=1 cpus=1 plan_cpus=1 cvd=2 '
}

@test "a bad --ddp-bind is refused at submission, naming the values" {
	run --separate-stderr crun srun --ddp=gloo --ddp-bind=closest -N1 true
	assert_failure
	[[ $stderr == *"ddp: --ddp-bind=closest: unknown policy (expected auto, none or strict)"* ]] ||
		fail "stderr: $stderr"
}

@test "a topology file that cannot be read: auto runs unbound with a warning, strict fails the step" {
	sed -i "s|^topology: .*|topology: /nonexistent/node.xml|" "$CONF"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	[[ $stderr == *"ddp: warning: --ddp-bind=auto ($CONF:"*"): tasks run unbound: topology /nonexistent/node.xml: cannot be read as an hwloc XML file"* ]] ||
		fail "stderr: $stderr"
	assert_line --regexp '^rank=0 local=0 cpus=0-1 '
	run --separate-stderr crun srun --ddp=gloo --ddp-bind=strict -N1 -n2 --gres=gpu:4 true
	assert_failure
	[[ $stderr == *"--ddp-bind=strict (--ddp-bind): topology /nonexistent/node.xml: cannot be read"* ]] ||
		fail "stderr: $stderr"
	# the node is not drained by a failing step
	run crun sinfo -h -o %t -n node1
	assert_output idle
}
