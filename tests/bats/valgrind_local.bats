#!/usr/bin/env bats
# ddp-check and ddp-env under valgrind, without Slurm: two ddp-check tasks
# over loopback with the torchrun variables set by hand (rendezvous, probe
# listener, clock skew, gloo all-reduce), a step whose every interface is
# missing (no node has a listener: the probe plan is empty), NCCL without
# a GPU (CUDA and NCCL opened at run time, refused) and on cuemu's (two
# tasks, one killed mid-sweep), rendezvous that fail
# (a task missing, the head unreachable), and ddp-env's
# contract and binding plans for a Slurm task's environment.  Valgrind
# must find no error and no definite leak.  (valgrind.bats does the same
# for the plugin inside slurmd and slurmstepd; cnn_train's oneDNN JIT code
# is beyond valgrind, its C code runs under ASan+UBSan in the unit pass.)
# bats file_tags=valgrind

load helpers

CHECK="$REPO/build/bin/ddp-check"
DDPENV="$REPO/build/bin/ddp-env"

setup() {
	command -v valgrind >/dev/null || skip "valgrind is missing (scripts/deps.sh installs it)"
	# hwloc's x86 CPUID backend cannot run under valgrind and says so;
	# the Linux backend alone reads the same topology here
	export HWLOC_COMPONENTS=-x86
}

# vg LOG CMD...: CMD under memcheck, its report in LOG; exit 97 on an error
# or a definite leak.  A child forked without exec is left out: ddp-check's
# task 0 forks one to run libslurm's query of the controller (tools/ddp-check/slurm.c),
# which ends by _exit with libslurm's state still allocated.
vg() {
	local log=$1
	shift
	valgrind -q --log-file="$log" --leak-check=full --errors-for-leak-kinds=definite \
		--child-silent-after-fork=yes \
		--error-exitcode=97 --num-callers=30 --suppressions="$REPO/tests/tools/valgrind.supp" "$@"
}

# a failing test shows valgrind's reports (an exit status of 97 says only
# that there was one)
teardown() {
	local f
	for f in "$BATS_TEST_TMPDIR"/vg.*; do
		[ -s "$f" ] && { echo "# valgrind's report, $(basename "$f"):"; cat "$f"; } >&2
	done
	return 0
}

# assert_clean TAG...: each valgrind report $BATS_TEST_TMPDIR/vg.TAG is empty
assert_clean() {
	local t f
	for t in "$@"; do
		f=$BATS_TEST_TMPDIR/vg.$t
		[ -e "$f" ] || { echo "no valgrind report $f: valgrind did not run" >&2; return 1; }
		[ ! -s "$f" ] || { echo "valgrind reported in $f" >&2; return 1; }
	done
}

# task RANK WORLD PORT VAR...: the torchrun variables of one task on loopback
task_env() {
	local r=$1 n=$2 port=$3
	shift 3
	env -i PATH="$PATH" HWLOC_COMPONENTS=-x86 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK="$r" \
		WORLD_SIZE="$n" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$n" NODE_RANK=0 DDP_BACKEND=gloo "$@"
}

# check_vg RANK WORLD PORT TAG VAR=VALUE... -- ARGS...: one ddp-check task
# with ARGS under valgrind (its report $BATS_TEST_TMPDIR/vg.TAG), the
# torchrun variables and each VAR set
check_vg() {
	local r=$1 n=$2 port=$3 tag=$4 vars=()
	shift 4
	while [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	task_env "$r" "$n" "$port" "${vars[@]}" bash -c "$(declare -f vg); REPO='$REPO' \
		vg '$BATS_TEST_TMPDIR/vg.$tag' '$CHECK' \"\$@\"" check_vg "$@"
}

@test "valgrind: ddp-check, two tasks over loopback: every check, no error or leak" {
	port=$(free_port)
	out=$BATS_TEST_TMPDIR
	check_vg 1 2 "$port" 1 GLOO_SOCKET_IFNAME=lo -- -e 64K --timeout=60 \
		>"$out/r1.out" 2>&1 &
	pid=$!
	# task 0's child asks libslurm for KillWait, of a controller that refuses
	printf 'ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=1\n' >"$out/slurm.conf"
	run --separate-stderr check_vg 0 2 "$port" 0 GLOO_SOCKET_IFNAME=lo SLURM_JOB_ID=12 \
		SLURM_CONF="$out/slurm.conf" -- -e 64K --timeout=60
	wait "$pid" || { cat "$out/r1.out" >&2; false; }
	assert_success
	assert_line --regexp '^# ddp-check [0-9.]+: backend gloo, world size 2 on 1 node'
	assert_line --regexp '^OK +coll\.allreduce +gloo all-reduce of crafted inputs exact on all 2 tasks'
	assert_line --regexp '^SKIP +slurm\.kill_wait +KillWait not read: slurm_load_ctl_conf: Unable to contact slurm controller \(connect failure\)$'
	assert_line --regexp '^OK +coll\.reduce_scatter +reduce_scatter exact at every size on all 2 tasks'
	assert_line --regexp '^SKIP +net\.pairs +one node: no link between nodes to time$'
	assert_line --regexp '^ddp-check: [0-9]+ checks OK, [01] WARN, 0 FAILED, 2 skipped$'
	assert_clean 0 1
}

@test "valgrind: ddp-check with the interface missing everywhere: net.iface FAILs, the empty probe plan reads clean" {
	port=$(free_port)
	run --separate-stderr check_vg 0 1 "$port" 0 GLOO_SOCKET_IFNAME=nosuch0 -- -e 0 --timeout=60
	assert_equal "$status" 1
	assert_line --regexp '^FAIL +net\.iface +task 0 \([^)]+\): GLOO_SOCKET_IFNAME=nosuch0: no such interface there'
	assert_line --regexp '^SKIP +coll\.allreduce +not run: net\.iface failed'
	assert_clean 0
}

# ddp-check's NCCL path end to end on cuemu's CUDA runtime and NCCL
# (build/tests/cuemu/lib; ddp_check_emu.bats): two tasks, the communicator
# set up, the all-reduces, the stream and buffers freed; then task 1
# killed at its 20th all-reduce where NCCL cannot see it (CUEMU_NCCL_SILENT):
# task 0 learns it from the store, aborts the communicator, stops waiting
# for the dead task's result and reports, all of it clean.
@test "valgrind: ddp-check over cuemu's NCCL, two tasks, then one killed mid-sweep: no error or leak" {
	local lib="$REPO/build/tests/cuemu/lib" out=$BATS_TEST_TMPDIR
	[ -e "$lib/libnccl.so.2" ] || skip "no cuemu libraries ($lib): CUDA's headers are missing here"
	local nccl=(NCCL_SOCKET_IFNAME=lo DDP_BACKEND=nccl LD_LIBRARY_PATH="$lib")
	port=$(free_port)
	check_vg 1 2 "$port" 1 "${nccl[@]}" CUEMU_PCI_BUS=1 -- -e 64K --timeout=60 >"$out/r1.out" 2>&1 &
	pid=$!
	run --separate-stderr check_vg 0 2 "$port" 0 "${nccl[@]}" -- -e 64K --timeout=60
	wait "$pid" || { cat "$out/r1.out" >&2; false; }
	assert_success
	assert_line --regexp '^OK +coll\.allreduce +nccl all-reduce of crafted inputs exact on all 2 tasks'
	assert_clean 0 1
	port=$(free_port)
	task_env 1 2 "$port" "${nccl[@]}" CUEMU_PCI_BUS=1 CUEMU_NCCL_KILL_AT=20 "$CHECK" -e 64K --timeout=60 \
		>"$out/r1.out" 2>&1 &
	pid=$!
	# (where NCCL cannot see it die: task 0's wait asks the store, then
	# aborts the communicator)
	run --separate-stderr check_vg 0 2 "$port" 2 "${nccl[@]}" CUEMU_NCCL_SILENT=1 -- -e 64K --timeout=60
	! wait "$pid" || false
	assert_equal "$status" 1
	assert_line --regexp '^FAIL +coll\.allreduce +task 1 \([^)]+\) died before it reported its result .*: task 1 died \(its connection to the rendezvous closed\); the communicator aborted$'
	assert_clean 2
}

@test "valgrind: ddp-check over NCCL where no GPU is visible: coll.backend FAILs, naming why" {
	[ ! -e /dev/nvidia0 ] || skip "a GPU here: NCCL's path is the GPU tests' (ddp_check.bats)"
	port=$(free_port)
	run --separate-stderr check_vg 0 1 "$port" 0 NCCL_SOCKET_IFNAME=lo DDP_BACKEND=nccl -- -e 1K --timeout=10
	assert_equal "$status" 1
	assert_line --regexp '^# ddp-check [0-9.]+: backend nccl, world size 1 on 1 node'
	assert_line --regexp '^FAIL +coll\.backend +task 0 \([^)]+\): .+'
	# its 4 MiB segment in /dev/shm made and removed; logind asked on a
	# system bus that is not there
	assert_line --regexp "^OK +net\.shm +a 4 MiB segment made in shared memory on every task, .*; logind's RemoveIPC not known \([^:]+: no system bus"
	assert_clean 0
	# and asked of a stand-in logind on a private bus (libsystemd's sd-bus,
	# loaded at run time, under valgrind too)
	local d
	d=$(mktemp -d /tmp/ddp-logind.XXXXXX)
	/usr/bin/python3 "$REPO/tests/tools/fake_logind.py" "$d" yes >"$d/out" 2>&1 &
	local pid=$!
	for _ in $(seq 50); do grep -q '^ready ' "$d/out" && break; sleep 0.1; done
	port=$(free_port)
	run --separate-stderr check_vg 0 1 "$port" 1 NCCL_SOCKET_IFNAME=lo DDP_BACKEND=nccl \
		DBUS_SYSTEM_BUS_ADDRESS="unix:path=$d/bus" -- -e 1K --timeout=10
	kill "$pid"
	wait "$pid" || true
	rm -rf "$d"
	assert_equal "$status" 1
	if [ "$(id -u)" -gt 999 ]; then
		assert_line --regexp "^WARN +net\.shm +logind's RemoveIPC=yes on "
	else
		assert_line --regexp "^OK +net\.shm +.*; RemoveIPC=yes spares the tasks' user \(uid $(id -u), a system user\)$"
	fi
	assert_clean 1
}

@test "valgrind: ddp-check's failing rendezvous: task 0 alone names the missing task, task 1 alone its unreachable head" {
	port=$(free_port)
	run --separate-stderr check_vg 0 2 "$port" 0 GLOO_SOCKET_IFNAME=lo -- -e 0 --timeout=3
	assert_equal "$status" 1
	assert_line --regexp "^FAIL +rdzv\\.join +task 1 \\(of 2\\) never joined the rendezvous at 127\\.0\\.0\\.1:$port within 3 s"
	assert_line --regexp '^SKIP +coll\.allreduce +not run: rdzv\.join failed'
	port=$(free_port)
	run --separate-stderr check_vg 1 2 "$port" 1 GLOO_SOCKET_IFNAME=lo -- -e 0 --timeout=3
	assert_equal "$status" 1
	[[ "$output$stderr" == *"FAIL rdzv.join: rank 1 could not reach 127.0.0.1:$port after 3 s: Connection refused"* ]]
	assert_clean 0 1
}

@test "valgrind: ddp-env --explain in a Slurm task's environment, binding plans, --check-config" {
	out=$BATS_TEST_TMPDIR
	host=$(hostname)
	run --separate-stderr env -i PATH="$PATH" HWLOC_COMPONENTS=-x86 MASTER_ADDR=127.0.0.1 \
		GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo SLURM_JOB_ID=7 SLURM_STEP_ID=0 \
		SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_NTASKS=2 SLURM_NNODES=1 \
		SLURM_STEP_NUM_TASKS=2 SLURM_STEP_NUM_NODES=1 SLURM_STEP_NODELIST="$host" \
		SLURM_NODELIST="$host" SLURM_STEP_TASKS_PER_NODE=2 SLURM_TASKS_PER_NODE=2 \
		SLURMD_NODENAME="$host" bash -c "$(declare -f vg); REPO='$REPO' vg '$out/vg.env' '$DDPENV' --explain"
	assert_success
	assert_line --regexp '^MASTER_PORT +20592 +20480 \+ \(job 7 \* 16 \+ step 0\) mod 12288'
	assert_line --regexp '^RANK +1 +SLURM_PROCID'
	assert_line --regexp '^WORLD_SIZE +2 '
	run --separate-stderr vg "$out/vg.h100" "$DDPENV" --topology "$REPO/tests/topologies/dgx-h100.xml" \
		--tasks 8 --gpus 0,1,2,3,4,5,6,7
	assert_success
	assert_line --regexp '^# 7 +7 0000:df:00\.0 +1 mlx5_7 +98-111,210-223 +14 1 +near its GPU'
	run --separate-stderr vg "$out/vg.nps4" "$DDPENV" \
		--topology "$REPO/tests/topologies/dgx-a100-epyc-nps4.xml" --tasks 4 --gpus 0,2,4,6 --bind=strict
	assert_success
	run --separate-stderr vg "$out/vg.conf" "$DDPENV" --check-config "$REPO/conf/ddp.yaml"
	assert_success
	assert_line --partial 'conf/ddp.yaml: valid'
	assert_clean env h100 nps4 conf
}
