#!/usr/bin/env bats
# TaskPlugin=task/cgroup with ConstrainCores=yes, as sites confine steps: a
# step's CPUs are its cgroup's cpuset, which slurmstepd and the task see,
# and which the plan must keep to, also when the admin gives the node's
# topology as a file.  Without task/affinity (affinity.bats), so the cpuset
# is the only confinement here.  cgroup v1 (Slurm's cgroup/v2 needs slurmd
# under systemd); skipped where its cpuset hierarchy is missing.
# bats file_tags=slurm

load helpers

setup_file() {
	[ -w /sys/fs/cgroup/cpuset/cgroup.procs ] ||
		skip "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset: task/cgroup not tested"
	[ "$(nproc --all)" -ge 2 ] || skip "needs 2 CPUs"
	DDP_CLUSTER_TASKPLUGIN=task/cgroup cluster_start 1
}

teardown_file() {
	cluster_stop
}

setup() {
	cluster_paths
}

teardown() {
	restore_conf
	[ -z "${HOLDER:-}" ] || crun scancel "$HOLDER" || true
}

# Another job takes one of node1's 2 CPUs (its cgroup's cpuset); HELD is it.
hold_one_cpu() {
	hold_job
	run crun srun --jobid="$HOLDER" --overlap -n1 bash -c \
		'cat "/sys/fs/cgroup/cpuset$(sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup)/cpuset.cpus"'
	assert_success
	HELD=$output
	[[ $HELD == [01] ]]
}

@test "a step beside another job: its cgroup's CPU is what the plugin plans, binds and --explain shows" {
	hold_one_cpu
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 bash -c \
		'"$0"; echo "cpuset=$(cat "/sys/fs/cgroup/cpuset$(sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup)/cpuset.cpus")"; "$1" --explain | grep "^# allowed"' \
		"$BIND_REPORT" "$REPO/build/bin/ddp-env"
	assert_success
	free=$((1 - HELD))
	assert_line "cpuset=$free"
	assert_matches_plan 1
	assert_line --regexp "^rank=0 local=0 cpus=$free plan_cpus=$free "
	assert_line "# allowed CPUs: $free (this process's cgroup cpuset, as hwloc reads it)"
}

@test "with the admin's topology: file the cgroup still counts: the task's GPU is the one near its CPU" {
	testnode_topology
	hold_one_cpu
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 --gres=gpu:4 "$BIND_REPORT"
	assert_success
	free=$((1 - HELD))
	# testnode.xml: CPU 0 is package 0 (GPUs 0000:20, 0000:30), CPU 1 package 1 (0000:60, 0000:70)
	if [ "$free" = 1 ]; then bus=0000:60:00.0 cvd=2,0,1,3; else bus=0000:20:00.0 cvd=0,2,1,3; fi
	assert_matches_plan 1
	assert_line --regexp "^rank=0 local=0 cpus=$free plan_cpus=$free cvd=$cvd plan_cvd=$cvd busid=$bus plan_busid=$bus "
	assert_line --partial "# cpu: bound: the cores near each task's GPU, split evenly"
}
