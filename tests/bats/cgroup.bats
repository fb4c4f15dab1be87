#!/usr/bin/env bats
# TaskPlugin=task/cgroup with ConstrainCores=yes, as sites confine steps: a
# step's CPUs are its cgroup's cpuset, which slurmstepd and the task see,
# and which the plan must keep to, also when the admin gives the node's
# topology as a file.  Without task/affinity (affinity.bats), so the cpuset
# is the only confinement here.  And ConstrainDevices=yes where the devices
# hierarchy is there: the GPUs' files are char devices 195:0-3 with no driver
# behind them, so a task can tell the GPUs its devices cgroup allows (open:
# ENXIO) from the others (EPERM), and CUDA's numbering of what it can open
# is checked against the plan.  cgroup v1 (Slurm's cgroup/v2 needs slurmd
# under systemd); skipped where its cpuset hierarchy is missing.
# bats file_tags=slurm

load helpers

setup_file() {
	[ -w /sys/fs/cgroup/cpuset/cgroup.procs ] ||
		skip "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset: task/cgroup not tested"
	[ "$(nproc --all)" -ge 2 ] || skip "needs 2 CPUs"
	if [ -w /sys/fs/cgroup/devices/cgroup.procs ]; then
		DDP_CLUSTER_TASKPLUGIN=task/cgroup DDP_CLUSTER_CONSTRAIN_DEVICES=1 cluster_start 1
	else
		DDP_CLUSTER_TASKPLUGIN=task/cgroup cluster_start 1
	fi
}

teardown_file() {
	cluster_stop
}

setup() {
	as_user # the jobs are the unprivileged user's
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

@test "the kept topology (topology_cache): written by one step, each next step's plan still takes its own cgroup's cpuset" {
	local cache="$DIR/topology-cache" f ino
	rm -rf "$cache"
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 "$BIND_REPORT"
	assert_success
	assert_matches_plan 1
	f=$(ls "$cache"/topology-*.xml)
	ino=$(stat -c %i "$f")
	hold_one_cpu
	free=$((1 - HELD))
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 "$BIND_REPORT"
	assert_success
	assert_matches_plan 1
	assert_line --regexp "^rank=0 local=0 cpus=$free plan_cpus=$free "
	# the same file: the cpuset is the step's, read at load, not the writer's
	assert_equal "$(stat -c %i "$f")" "$ino"
	# from the export's mapped copy, which holds its writer's allowed
	# CPUs (both): two tasks on the step's one CPU are both planned there
	# (the cgroup's, as the plugin reads it), so neither is refused a
	# binding to the held CPU
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 --overcommit bash -c \
		'echo "$SLURM_LOCALID $(sed -n "s/^Cpus_allowed_list:\t//p" /proc/self/status) $DDP_BIND_TOPOLOGY"'
	assert_success
	assert_line "0 $free this machine (hwloc, mapped from ${f%.xml}.shm)"
	assert_line "1 $free this machine (hwloc, mapped from ${f%.xml}.shm)"
	[[ "$stderr" != *warning* ]] || fail "a task was not bound as planned: $stderr"
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

# A task under ConstrainDevices: which of /dev/nvidia0-3 its devices cgroup
# lets it open (ENXIO: allowed, no driver; EPERM: denied), then what
# bind_report.sh says of it.
constrained_task() {
	local dev=${DDP_CLUSTER_DIR:-$REPO/build/cluster}/dev/nvidia
	run --separate-stderr crun srun "$@" bash -c '
		allowed= denied=
		for i in 0 1 2 3; do
			case $(exec 2>&1; : <"$1$i") in
			*"No such device"*) allowed="$allowed,$i" ;;
			*"not permitted"*) denied="$denied,$i" ;;
			*) echo "nvidia$i: neither allowed nor denied" ;;
			esac
		done
		echo "local=$SLURM_LOCALID step=$SLURM_STEP_GPUS allowed=${allowed#,} denied=${denied#,} cvd=${CUDA_VISIBLE_DEVICES:-unset} bus=${DDP_GPU_BUSID:-unset}"
		[ -z "$2" ] || "$2"' constrained_task "$dev" "${REPORT:-}"
}

@test "ConstrainDevices: the step's GPUs are the ones its cgroup allows, and Slurm numbers them from 0" {
	grep -q '^ConstrainDevices=yes' "${DDP_CLUSTER_DIR:-$REPO/build/cluster}/etc/cgroup.conf" ||
		skip "no cgroup v1 devices hierarchy: ConstrainDevices not tested"
	hold_job --gres=gpu:1
	constrained_task -N1 -n1 --gres=gpu:2
	assert_success
	# the holder has GRES 0; Slurm counts the step's 1 and 2 from 0 for CUDA
	assert_line "local=0 step=1,2 allowed=1,2 denied=0,3 cvd=0,1 bus=unset"
}

@test "ConstrainDevices with --ddp: each task's CUDA_VISIBLE_DEVICES names, among the GPUs it can open, its planned one" {
	grep -q '^ConstrainDevices=yes' "${DDP_CLUSTER_DIR:-$REPO/build/cluster}/etc/cgroup.conf" ||
		skip "no cgroup v1 devices hierarchy: ConstrainDevices not tested"
	testnode_topology
	hold_job --gres=gpu:1
	REPORT=$BIND_REPORT constrained_task --ddp=gloo -N1 -n2 --gres=gpu:2
	assert_success
	assert_matches_plan 2
	# testnode.xml by bus id: GRES k is /dev/nvidia k, the k-th of these
	# (no NVIDIA driver list: minor order taken for bus order)
	local bus=(0000:20:00.0 0000:30:00.0 0000:60:00.0 0000:70:00.0) line seen=
	for l in 0 1; do
		line=$(grep "^local=$l " <<<"$output") || fail "no line for local rank $l"
		[[ $line =~ step=1,2\ allowed=1,2\ denied=0,3\ cvd=([0-9,]+)\ bus=([0-9a-f:.]+) ]] ||
			fail "local rank $l: $line"
		local cvd=${BASH_REMATCH[1]} mine=${BASH_REMATCH[2]}
		# CUDA numbers the GPUs it can open (1 and 2) in bus order: CUDA
		# device c is GRES c + 1; the task opens device local_rank of its
		# list
		local -a ids
		IFS=, read -r -a ids <<<"$cvd"
		local opens=${bus[$((ids[l] + 1))]}
		[ "$opens" = "$mine" ] ||
			fail "local rank $l: CUDA_VISIBLE_DEVICES=$cvd opens $opens as device $l, but DDP_GPU_BUSID=$mine"
		seen="$seen $mine"
	done
	[ "$(tr ' ' '\n' <<<"$seen" | sort -u | grep -c .)" = 2 ] || fail "the two tasks share a GPU:$seen"
	assert_line --partial "bus=0000:30:00.0"
	assert_line --partial "bus=0000:60:00.0"
}
