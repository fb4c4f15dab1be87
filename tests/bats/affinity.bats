#!/usr/bin/env bats
# The CPUs Slurm confines a step to, as most sites run it: TaskPlugin=
# task/affinity binds every task itself (auto binding) and sets
# SLURM_CPU_BIND in each, asked or not, and task/cgroup's cpuset limits the
# step.  The plugin must tell the user's --cpu-bind from Slurm's own
# binding, stay inside the CPUs Slurm gave the step (other jobs share the
# node), and read the cgroup's cpuset also from the admin's topology: file.
# bats file_tags=slurm

load helpers

cluster_file 2 DDP_CLUSTER_TASKPLUGIN=task/affinity

setup() {
	as_user # the jobs are the unprivileged user's
	cluster_paths
}

teardown() {
	restore_conf
	[ -z "${HOLDER:-}" ] || crun scancel "$HOLDER" || true
	[ -z "${CG:-}" ] || rmdir "$CG" 2>/dev/null || true
}

@test "task/affinity's auto binding is Slurm's, not the user's: the plugin binds each task near its GPU, as --explain planned" {
	testnode_topology
	# what Slurm alone does here: binds both tasks, SLURM_CPU_BIND set unasked
	# (22.05: each on both CPUs, mask_cpu:0x3; 24.11: each on its own, mask_cpu:0x1,0x2)
	run --separate-stderr crun srun -N1 -n2 -w node1 bash -c 'echo "$(grep Cpus_allowed_list /proc/self/status | cut -f2) $SLURM_CPU_BIND"'
	assert_success
	assert_equal "$(grep -c -E '^[0-9,-]+ quiet,mask_cpu:0x[0-9a-f,x]+$' <<<"$output")" 2
	run --separate-stderr crun srun --ddp=gloo -N2 --ntasks-per-node=2 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	assert_matches_plan 4
	assert_line --regexp '^rank=[02] local=0 cpus=0 plan_cpus=0 cvd=0,2,1,3 .* busid=0000:20:00.0 '
	assert_line --regexp '^rank=[13] local=1 cpus=1 plan_cpus=1 cvd=0,2,1,3 .* busid=0000:60:00.0 '
	assert_line --partial "# cpu: bound: the cores near each task's GPU, split evenly"
	refute_line --partial "explicit --cpu-bind"
}

@test "an explicit --cpu-bind stays the user's: Slurm's masks, each task's GPU near them, said so, DDP_SLURM_CPU_BIND for ddp-env in the task" {
	testnode_topology
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --gres=gpu:4 --cpu-bind=map_cpu:1,0 \
		bash -c '"$0"; echo "local=$SLURM_LOCALID user_cpu_bind=$DDP_SLURM_CPU_BIND"' "$BIND_REPORT"
	assert_success
	# task 0 on CPU 1 (package 1) takes GPU 2 (0000:60:00.0), task 1 on CPU 0 GPU 0
	assert_line --regexp '^rank=0 local=0 cpus=1 plan_cpus=\(left cvd=2,0,1,3 plan_cvd=2,0,1,3 busid=0000:60:00.0 plan_busid=0000:60:00.0 '
	assert_line --regexp '^rank=1 local=1 cpus=0 plan_cpus=\(left cvd=2,0,1,3 plan_cvd=2,0,1,3 busid=0000:20:00.0 plan_busid=0000:20:00.0 '
	assert_line --partial "# cpu: explicit --cpu-bind (DDP_SLURM_CPU_BIND=quiet,map_cpu:1,0): left to Slurm"
	assert_line --partial "; each task's GPU near the CPUs of its --cpu-bind"
	assert_line "local=0 user_cpu_bind=quiet,map_cpu:1,0"
	assert_line "local=1 user_cpu_bind=quiet,map_cpu:1,0"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --cpu-bind=none "$BIND_REPORT"
	assert_success
	assert_line --regexp '^rank=0 local=0 cpus=0-1 plan_cpus=\(left '
	assert_line --partial "# cpu: explicit --cpu-bind (DDP_SLURM_CPU_BIND=quiet,none): left to Slurm"
}

@test "--gpu-bind=closest under task/affinity: Slurm picked the GPUs near the CPUs it bound each task to, so those stay" {
	testnode_topology
	# Slurm's own CPUs for each task of this step (22.05: both CPUs each; 24.11: one each)
	run --separate-stderr crun srun -N1 -n2 -w node1 --gres=gpu:4 --gpu-bind=closest \
		bash -c 'echo "$SLURM_LOCALID $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
	assert_success
	local slurm0 slurm1
	slurm0=$(awk '$1 == 0 { print $2 }' <<<"$output")
	slurm1=$(awk '$1 == 1 { print $2 }' <<<"$output")
	[ -n "$slurm0" ] && [ -n "$slurm1" ] || fail "no CPUs of Slurm's own binding: $output"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 -w node1 --gres=gpu:4 --gpu-bind=closest "$BIND_REPORT"
	assert_success
	assert_line --regexp "^rank=0 local=0 cpus=$slurm0 plan_cpus=\\(left "
	assert_line --regexp "^rank=1 local=1 cpus=$slurm1 plan_cpus=\\(left "
	assert_line --regexp "# cpu: Slurm picked each task's GPUs near the CPUs task/affinity gave it \(--gpu-bind=closest or single, --ntasks-per-gpu\): those CPUs stay \(SLURMD_TRES_BIND=(gres/)?gpu:closest\): left to Slurm"
	assert_line --partial "# gpu: Slurm binds GPUs per task"
}

@test "a step given one CPU of a node another job shares stays on that CPU" {
	hold_job -w node1
	run crun srun --jobid="$HOLDER" --overlap -n1 bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2'
	assert_success
	held=$output
	[[ $held == [01] ]]
	run --separate-stderr crun srun --ddp=gloo -w node1 -N1 -n1 "$BIND_REPORT"
	assert_success
	assert_matches_plan 1
	# the other CPU: task/affinity's mask, not the whole machine (0-1)
	assert_line --regexp "^rank=0 local=0 cpus=$((1 - held)) plan_cpus=$((1 - held)) "
	run crun srun --ddp=gloo -w node1 -N1 -n1 "$REPO/build/bin/ddp-env" --explain
	assert_success
	assert_line --regexp "^# allowed CPUs: $((1 - held)) \(.*within the CPUs task/affinity gave this node's tasks \(SLURM_CPU_BIND=quiet,mask_cpu:0x$((2 - held))\)\)$"
}

@test "another step's plugin variables in the environment (a nested srun) are not this step's" {
	testnode_topology
	run --separate-stderr crun env DDP_GPU_BUSID=0000:99:00.0 DDP_NIC=mlx5_9 DDP_SLURM_CPU_BIND=quiet,cores \
		DDP_SLURM_STEP_GPUS=7 DDP_SLURM_CUDA_VISIBLE_DEVICES=7 DDP_RDZV_TOKEN=0123 DDP_CONFIG=/nonexistent \
		srun --ddp=gloo -N1 -n2 bash -c '"$0"; echo "local=$SLURM_LOCALID stale=${DDP_GPU_BUSID-}${DDP_NIC-}${DDP_SLURM_CPU_BIND-}${DDP_SLURM_STEP_GPUS-}${DDP_SLURM_CUDA_VISIBLE_DEVICES-}${DDP_RDZV_TOKEN-} config=$DDP_CONFIG"' "$BIND_REPORT"
	assert_success
	# a CPU-only step: none of them is set, and the CPUs are the plugin's
	assert_matches_plan 2
	assert_line --regexp '^rank=0 local=0 cpus=0 plan_cpus=0 cvd=unset plan_cvd=none busid=unset '
	assert_line "local=0 stale= config=$CONF"
	assert_line "local=1 stale= config=$CONF"
}

# A cpuset cgroup allowing only CPU $1 (cgroup v1, or v2 with cpuset
# enabled at the root); its path in CG.  Fails where neither is at hand.
cpuset_cgroup() {
	local v1=/sys/fs/cgroup/cpuset
	if [ -w "$v1/cgroup.procs" ]; then
		CG="$v1/ddp-bats-$$"
		mkdir "$CG" && cat "$v1/cpuset.mems" >"$CG/cpuset.mems" && echo "$1" >"$CG/cpuset.cpus"
	elif grep -qw cpuset /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
		CG="/sys/fs/cgroup/ddp-bats-$$"
		mkdir "$CG" && echo "$1" >"$CG/cpuset.cpus"
	else
		return 1
	fi
}

@test "the admin's topology: file still takes the allowed CPUs from the step's cgroup cpuset" {
	[ "$(nproc --all)" -ge 2 ] || skip "needs 2 CPUs"
	cpuset_cgroup 1 || skip "no cpuset cgroup can be made here (cgroup v1 cpuset, or v2 with cpuset in the root's subtree_control)"
	lstopo-no-graphics --of xml --whole-io "$BATS_TEST_TMPDIR/self.xml"
	printf 'topology: %s\n' "$BATS_TEST_TMPDIR/self.xml" >"$BATS_TEST_TMPDIR/ddp.yaml"
	run env -i PATH="$PATH" DDP_CONFIG="$BATS_TEST_TMPDIR/ddp.yaml" MASTER_ADDR=10.1.1.1 \
		SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=2 SLURM_STEP_NODELIST=node1 \
		SLURM_STEP_NUM_NODES=1 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 SLURM_LOCALID=0 SLURMD_NODENAME=node1 \
		bash -c 'echo $$ >"$0/cgroup.procs" && exec "$1" --explain' "$CG" "$REPO/build/bin/ddp-env"
	assert_success
	assert_line --partial "topology $BATS_TEST_TMPDIR/self.xml"
	assert_line "# allowed CPUs: 1 (this process's cgroup cpuset, as hwloc reads it)"
	assert_line --regexp '^# 0 +- - +- - +1 '
}
