# Shared by the Bats tests: the repo, the test cluster, bats-assert.
bats_require_minimum_version 1.5.0
load '/usr/lib/bats/bats-support/load'
load '/usr/lib/bats/bats-assert/load'

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
CLUSTER="$REPO/tests/cluster/cluster.sh"
CLUSTER_DIR=${DDP_CLUSTER_DIR:-$REPO/build/cluster}
REPORT="$REPO/tests/bats/task_report.sh"
export BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

# plain_data: DDP_DATA_DIR at Fashion-MNIST unpacked (make -C tests unit:
# build/tests/data), for the files that start cnn_train dozens of times: a
# rank reads the IDX files instead of inflating 26 MB; where that copy is
# missing, the installed .gz files as before.  srun passes it on to tasks.
plain_data() {
	local d=$REPO/build/tests/data/fashion-mnist f
	for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
		[ -f "$d/$f" ] || return 0
	done
	export DDP_DATA_DIR=$d
}

# the networks the running cluster chose (cluster.sh writes them at start)
cluster_net() { sed -n "s/^$1=//p" "$CLUSTER_DIR/net" 2>/dev/null; }
node_ip() { echo "$(cluster_net NET).$((10 + $1))"; }
# a node's address on the IPv6 network of DDP_CLUSTER_IPV6 (ipv6.bats)
node_ip6() { echo "$(cluster_net NET6)::$((10 + $1))"; }

# a TCP port for a rendezvous store: free now on every address, below the
# ephemeral range (scripts/free-port says why)
free_port() { /usr/bin/python3 "$REPO/scripts/free-port"; }

# wait_line FILE REGEX [SECONDS]: until a line of FILE matches (a process
# writing it got that far), at most SECONDS (60); fails after that.
wait_line() {
	local i
	for ((i = 0; i < ${3:-60} * 10; i++)); do
		grep -qE "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "no line of $1 matched '$2' after ${3:-60} s"
	return 1
}

cluster_start() { "$CLUSTER" start "$1" >&3 2>&1; }
# every node up, none drained (nothing a test did took a node out)
nodes_healthy() {
	run crun sinfo -h -N -o '%N %T'
	assert_success
	refute_output --regexp 'drain|down|fail'
}
cluster_stop() { "$CLUSTER" stop >/dev/null 2>&1 || true; }

# cluster_file N [VAR=VALUE ...]: the file's tests share one cluster of N
# nodes, started before them (setup_file, with the DDP_CLUSTER_* settings
# given, which the tests do not inherit) and stopped after them
# (teardown_file).  Called at the file's top level, after load helpers.
cluster_file() {
	CLUSTER_FILE_NODES=$1
	CLUSTER_FILE_ENV=("${@:2}")
	setup_file() {
		if [ ${#CLUSTER_FILE_ENV[@]} -gt 0 ]; then
			local -x "${CLUSTER_FILE_ENV[@]}"
		fi
		cluster_start "$CLUSTER_FILE_NODES"
	}
	teardown_file() { cluster_stop; }
}

# The cluster's run folder, its ddp.yaml (tests edit it) and the binding
# report; then, after each test, the logs if it failed and the shipped
# ddp.yaml back.
cluster_paths() {
	DIR=$CLUSTER_DIR
	CONF="$DIR/etc/ddp.yaml"
	BIND_REPORT="$REPO/tests/bats/bind_report.sh"
}
restore_conf() {
	dump_logs_on_failure
	cp "$REPO/conf/ddp.yaml" "$CONF"
}

# Run a Slurm client inside the cluster (bounded): as root, or, in a file
# that called as_user, as the cluster's unprivileged user (what a user
# runs); crun_root and curun say which whatever the file chose.
SUBMIT_AS=root
crun() { if [ "$SUBMIT_AS" = user ]; then curun "$@"; else crun_root "$@"; fi; }
crun_root() { timeout 90 "$CLUSTER" run "$@"; }
curun() { timeout 90 "$CLUSTER" user "$@"; }
TEST_USER=${DDP_CLUSTER_USER:-ddp-test}
# user_dir: a folder of /tmp the test user owns (for what its tasks write;
# a Bats temporary folder is root's alone), removed by the caller
user_dir() { local d; d=$(mktemp -d /tmp/ddp-user.XXXXXX) && chown "$TEST_USER:" "$d" && echo "$d"; }
# as_user (in setup): this test's jobs are the unprivileged user's, and
# the test's and the file's temporary folders are the user's to write in
# (a job's output, what its tasks write); the folders above them only to
# pass through.
as_user() {
	SUBMIT_AS=user
	chmod o+x "$BATS_RUN_TMPDIR" "$(dirname "$BATS_FILE_TMPDIR")" "$(dirname "$BATS_TEST_TMPDIR")" 2>/dev/null || true
	chown "$TEST_USER:" "$BATS_TEST_TMPDIR" "$BATS_FILE_TMPDIR"
}

# sbatch_wait ARGS...: sbatch --wait without its sleeps (2 s, then 8, then
# 32: a job that ends at second 11 is seen at second 42).  Submits, polls
# the job's state every 0.2 s for up to SBATCH_WAIT_MAX seconds (280), and
# returns as sbatch --wait does: the job's exit code, 1 if a signal ended it.
sbatch_wait() {
	local out job st rc sig i
	out=$(crun sbatch --parsable "$@") || return
	job=${out%%;*}
	echo "Submitted batch job $job"
	for ((i = 0; i < ${SBATCH_WAIT_MAX:-280} * 5; i++)); do
		st=$("$CLUSTER" run scontrol show job -o "$job" 2>/dev/null) || true
		if [[ " $st " =~ \ JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)\  ]]; then
			read -r rc sig < <(sed -n 's/.* ExitCode=\([0-9]*\):\([0-9]*\).*/\1 \2/p' <<<"$st")
			[ "${sig:-0}" = 0 ] || return 1
			[ "${rc:-0}" = 0 ] || return "$rc"
			[ "${BASH_REMATCH[1]}" = COMPLETED ] && return 0
			return 1
		fi
		sleep 0.2
	done
	echo "sbatch_wait: job $job not over after ${SBATCH_WAIT_MAX:-280} s" >&2
	return 124
}

# Lines "task ..." of $output (tests/bats/task_report.sh) into the array T,
# and column N of them.
tasks() { mapfile -t T < <(printf '%s\n' "$output" | grep '^task '); }
field() { printf '%s\n' "${T[@]}" | awk -v f="$1" '{print $f}'; }

# hold_port I PORT: a listener on PORT in node I's namespace (at most 60 s),
# its pid in LISTENER, returning once it listens.
hold_port() {
	local ns
	ns="/run/netns/$(cluster_net NS)-n$1"
	nsenter --net="$ns" /usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); time.sleep(60)' "$2" \
		</dev/null >/dev/null 2>&1 3>&- &
	LISTENER=$!
	for _ in $(seq 1 50); do
		nsenter --net="$ns" ss -Hltn "sport = :$2" | grep -q . && return 0
		sleep 0.1
	done
}

# hold_job SBATCH-ARGS...: another job (sleep 120) holding what the
# arguments ask for, its id in HOLDER, returning once it runs (a step
# started before it would take what it is meant to hold).
hold_job() {
	run crun sbatch --parsable -o /dev/null -n1 "$@" --wrap "sleep 120"
	assert_success
	HOLDER=$output
	for _ in $(seq 1 80); do
		[ "$(crun squeue -h -j "$HOLDER" -o %t)" = R ] && return 0
		sleep 0.25
	done
	fail "job $HOLDER ($*) did not start in 20 s"
}

# Dump the daemons' logs when a test failed, redis-style.
dump_logs_on_failure() {
	local d=${DDP_CLUSTER_DIR:-$REPO/build/cluster}
	if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -d "$d/log" ]; then
		for f in "$d"/log/slurmctld.log "$d"/log/slurmd.node*.log; do
			[ -f "$f" ] && { echo "--- tail $f"; tail -n 15 "$f"; }
		done
	fi
}

# ---- binding (bind.bats, gres.bats): lines of tests/bats/bind_report.sh ----

# The cluster's ddp.yaml ($CONF) names tests/topologies/testnode.xml: the
# nodes' 2 CPUs as two packages, two fake GPUs behind each.
testnode_topology() {
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$CONF"
}

# Every task got what the plan says.
assert_matches_plan() {
	local line n=0
	while read -r line; do
		[[ $line == rank=* ]] || continue
		n=$((n + 1))
		local cpus plan_cpus cvd plan_cvd busid plan_busid
		cpus=$(sed 's/.* cpus=\([^ ]*\).*/\1/' <<<"$line")
		plan_cpus=$(sed 's/.* plan_cpus=\([^ ]*\).*/\1/' <<<"$line")
		cvd=$(sed 's/.* cvd=\([^ ]*\).*/\1/' <<<"$line")
		plan_cvd=$(sed 's/.* plan_cvd=\([^ ]*\).*/\1/' <<<"$line")
		busid=$(sed 's/.* busid=\([^ ]*\).*/\1/' <<<"$line")
		plan_busid=$(sed 's/.* plan_busid=\([^ ]*\).*/\1/' <<<"$line")
		# "(left" (alone) and "none": the plan sets nothing there
		[ "$cpus" = "$plan_cpus" ] || [ "$plan_cpus" = "(left" ] ||
			fail "Cpus_allowed_list $cpus, planned $plan_cpus: $line"
		[ "$cvd" = "$plan_cvd" ] || [ "$plan_cvd" = none ] ||
			fail "CUDA_VISIBLE_DEVICES $cvd, planned $plan_cvd: $line"
		[ "$busid" = "$plan_busid" ] || [ "$plan_busid" = - ] ||
			fail "DDP_GPU_BUSID $busid, planned $plan_busid: $line"
	done <<<"$output"
	[ "$n" -ge "${1:-1}" ] || fail "expected ${1:-1} task lines, got $n"
}

# What CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID; no ConstrainDevices here, so
# every GPU of the driver's list DIR) opens as device LOCAL under CVD: the
# bus id of the LOCAL-th entry, a number in bus order or a UUID's start.
cuda_opens() {
	local dir=$1 cvd=$2 lr=$3 ents order b
	IFS=, read -ra ents <<<"$cvd"
	mapfile -t order < <(ls "$dir" | sort)
	if [[ ${ents[$lr]} == GPU-* ]]; then
		for b in "${order[@]}"; do
			if [[ $(awk '/^GPU UUID:/ {print $NF}' "$dir/$b/information") == "${ents[$lr]}"* ]]; then
				echo "$b"
			fi
		done
	else
		echo "${order[${ents[$lr]}]}"
	fi
}

# Every task line: its GPU as CUDA would open it is the one planned.
assert_cuda_opens_planned() {
	local line n=0
	while read -r line; do
		[[ $line == rank=* ]] || continue
		local lr cvd busid got
		lr=$(sed 's/.* local=\([^ ]*\).*/\1/' <<<"$line")
		cvd=$(sed 's/.* cvd=\([^ ]*\).*/\1/' <<<"$line")
		busid=$(sed 's/.* busid=\([^ ]*\).*/\1/' <<<"$line")
		got=$(cuda_opens "$1" "$cvd" "$lr")
		[ "$got" = "$busid" ] || fail "CUDA would open '$got' as device $lr, planned $busid: $line"
		n=$((n + 1))
	done <<<"$output"
	[ "$n" -ge 1 ] || fail "no task lines"
}

# The mean of |a - b| over two --dump-params files, at most LIMIT.  The
# mean, not the largest: a value that sits on a ReLU's zero or ties a
# max-pool window, a rounding apart in the two runs, goes one way in one and
# the other in the next, and moves the few weights it feeds by up to 3e-4
# (measured) in the steps after; a wrong batch, mask or update moves most
# of them (one shifted batch of 8 steps: mean 4.7e-4, 683,545 of the
# 1,199,882 weights by more than 1e-5).
# (cnn_train's parameters from two runs, to a tolerance)
params_within() {
	run /usr/bin/python3 -c '
import sys, numpy as np
a = np.fromfile(sys.argv[1], np.float32); b = np.fromfile(sys.argv[2], np.float32)
d = np.abs(a - b); m = float(d.mean())
print(f"mean |difference| {m:.3g} (at most {sys.argv[3]}), largest {float(d.max()):.3g}, {int((d > 1e-5).sum())} of {a.size} parameters by more than 1e-5")
sys.exit(0 if a.size == b.size == 1199882 and m <= float(sys.argv[3]) else 1)' "$1" "$2" "$3"
	echo "$output"
	assert_success
}

# The NVIDIA driver's list of the node's GPUs, faked (DDP_CHECK_NVIDIA_GPUS):
# minor N at the bus ids given in order.
fake_nvidia() {
	local dir=$1 minor=0 bus
	shift
	rm -rf "$dir"
	for bus in "$@"; do
		mkdir -p "$dir/$bus"
		printf 'Model: \t\t NVIDIA H100 80GB HBM3\nBus Type: \t PCIe\nBus Location: \t %s\nDevice Minor: \t %d\n' \
			"$bus" "$minor" >"$dir/$bus/information"
		minor=$((minor + 1))
	done
}

# A PCI device in a sysfs tree as ddp-check reads it (DDP_CHECK_SYSFS):
# fake_pci ROOT BUSID SPEED WIDTH MAX_SPEED MAX_WIDTH
fake_pci() {
	local dev=$1/bus/pci/devices/$2
	mkdir -p "$dev"
	echo "$3" >"$dev/current_link_speed"
	echo "$4" >"$dev/current_link_width"
	echo "$5" >"$dev/max_link_speed"
	echo "$6" >"$dev/max_link_width"
	chmod -R a+rX "$1"
}

# A node's sysfs: mlx5_0 on PCI device 0000:3d:00.0 (Gen4, x16 at most) at
# width $3, its port 1 in state $2 at rate $4.
fake_sysfs() {
	local d=$1 port=$1/class/infiniband/mlx5_0/ports/1
	mkdir -p "$port"
	fake_pci "$d" 0000:3d:00.0 "16.0 GT/s PCIe" "$3" "16.0 GT/s PCIe" 16
	echo "$2" >"$port/state"
	echo "$4" >"$port/rate"
	echo InfiniBand >"$port/link_layer"
	ln -s ../../../bus/pci/devices/0000:3d:00.0 "$d/class/infiniband/mlx5_0/device"
	chmod -R a+rX "$d"
}
