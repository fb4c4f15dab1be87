#!/usr/bin/env bats
# ddp-check --ddp=nccl where no GPU is: its NCCL path (tools/ddp-check/nccl_dl.c,
# which loads libcudart and libnccl at run time) on cuemu's runtime and
# NCCL (tests/Makefile: build/tests/cuemu/lib, libcudart.so and
# libnccl.so.2), two ranks on this machine as srun --ddp would start them,
# each on a GPU of its own (CUEMU_PCI_BUS).  ddp_check.bats runs ddp-check on
# the cluster, and on a real GPU where there is one.
# bats file_tags=check,gpu

load helpers

BATS_TEST_TIMEOUT=120

CHECK="$REPO/build/bin/ddp-check"
EMU_LIB="$REPO/build/tests/cuemu/lib"

setup() {
	[ -e "$EMU_LIB/libnccl.so.2" ] || skip "no cuemu libraries ($EMU_LIB): CUDA's headers are missing here (see tests/Makefile)"
}

# check2 OUT R0ENV R1ENV ARGS...: ddp-check as ranks 0 and 1 of a world of
# two on this machine over NCCL (each with its own environment R0ENV and
# R1ENV, words VAR=value); rank 0's output is the run's, rank 1's in
# OUT.r1, its status in OUT.rc, rank 0's seconds in OUT.secs
check2() {
	local out=$1 r0env=$2 r1env=$3 port pid t0
	shift 3
	port=$(free_port)
	local env=(MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0
		DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo LD_LIBRARY_PATH="$EMU_LIB")
	# shellcheck disable=SC2086 # (R1ENV: words)
	env "${env[@]}" RANK=1 LOCAL_RANK=1 CUEMU_PCI_BUS=1 $r1env timeout 100 "$CHECK" "$@" >"$out.r1" 2>&1 3>&- &
	pid=$!
	t0=$SECONDS
	# shellcheck disable=SC2086 # (R0ENV: words)
	run --separate-stderr env "${env[@]}" RANK=0 LOCAL_RANK=0 $r0env timeout 100 "$CHECK" "$@"
	echo $((SECONDS - t0)) >"$out.secs"
	local rc=0
	wait "$pid" || rc=$?
	echo "$rc" >"$out.rc"
	echo "$output"
	echo "$stderr"
	cat "$out.r1"
}

@test "ddp-check --ddp=nccl on cuemu: the communicator, the exact all-reduce and the busbw sweep on two ranks" {
	local d="$BATS_TEST_TMPDIR"
	check2 "$d/ok" "" "" -e 64K --timeout 30
	# (bind.cpus warns: nothing binds the two ranks here)
	assert_line --regexp '^OK +coll.backend +NCCL [0-9]+\.[0-9]+\.[0-9]+ and a GPU on every task$'
	assert_line --regexp '^OK +bind.gpus +each of 2 GPUs is used by exactly one task$'
	assert_line --regexp '^OK +coll.allreduce +nccl all-reduce of crafted inputs exact on all 2 tasks \(1 and 16384 floats, sums of rank\+1\)$'
	assert_line --regexp '^OK +coll.busbw +busbw [0-9.]+ GB/s at 65536 bytes$'
	assert_line --regexp '^OK +time.first_collective +[0-9.]+ s from task start to the first completed all-reduce '
	assert_output --regexp '
 +65536 +16384 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+
'
	refute_line --regexp '^FAIL'
	[ "$(cat "$d/ok.rc")" -eq 0 ]
	# NCCL_COMM_ID on every rank: rank 0's id names that address
	local port
	port=$(free_port)
	check2 "$d/id" "NCCL_COMM_ID=127.0.0.1:$port" "" -e 64K --timeout 30
	assert_line --regexp '^OK +coll.allreduce +nccl all-reduce of crafted inputs exact on all 2 tasks '
	assert_line --regexp "^WARN +env.nccl +NCCL_COMM_ID differs between tasks: '127.0.0.1:$port' on task 0 \([^)]+\), unset on task 1 "
}

# Rank 0 makes NCCL's unique id and hands it to the others through the
# rendezvous.  When it cannot (here an NCCL_COMM_ID NCCL cannot parse, on
# its task alone), it says so in the store, and the other ranks stop
# waiting for the id at once (they waited for --timeout before), each
# naming rank 0's reason; the report lists rank 0 first, then the ranks
# that stopped because of it.
@test "rank 0 cannot make NCCL's unique id: the others stop at once, naming its reason (cuemu)" {
	local d="$BATS_TEST_TMPDIR"
	check2 "$d/bad" "NCCL_COMM_ID=nonsense" "" -e 64K --timeout 30
	assert_failure 1
	[ "$(cat "$d/bad.rc")" -eq 1 ]
	echo "rank 0 took $(cat "$d/bad.secs") s"
	[ "$(cat "$d/bad.secs")" -le 10 ]
	local why='NCCL ncclGetUniqueId: invalid argument: Invalid NCCL_COMM_ID \[nonsense\], please use format: <ipv4>:<port> or \[<ipv6>\]:<port> or <hostname>:<port>'
	assert_line --regexp "^FAIL +coll.allreduce +task 0 \\([^)]+\\): $why; task 1 \\([^)]+\\): NCCL unique id from rank 0: a peer failed first \\(task 0: $why\\)$"
	assert_line --regexp "^WARN +env.nccl +NCCL_COMM_ID differs between tasks: 'nonsense' on task 0 "
	grep -E "^ddp-check: task 1 \\([^)]+\\): FAIL coll.allreduce: NCCL unique id from rank 0: a peer failed first \\(task 0: $why\\)$" "$d/bad.r1"
}

# A task killed mid-sweep (cuemu's NCCL kills rank 1 as its 40th
# all-reduce starts): the survivor's all-reduce fails on the closed
# connection, and task 0 stops waiting for the dead task's result when the
# store sees its connection close (it waited for --timeout before), then
# names the dead task first.
@test "a task killed mid-sweep: task 0 reports within seconds, the dead task first (cuemu)" {
	local d="$BATS_TEST_TMPDIR"
	check2 "$d/kill" "" CUEMU_NCCL_KILL_AT=40 --timeout 30 -e 1M
	assert_failure 1
	[ "$(cat "$d/kill.rc")" -eq 137 ]
	echo "task 0 took $(cat "$d/kill.secs") s"
	[ "$(cat "$d/kill.secs")" -le 10 ]
	assert_line --regexp '^FAIL +coll.allreduce +task 1 \([^)]+\) died before it reported its result \(its connection to the rendezvous closed: killed, or crashed\); task 0 \([^)]+\): bandwidth sweep failed: NCCL all-reduce: remote process exited or there was a network error: '
	assert_line --regexp '^SKIP +time.first_collective +1 of 2 tasks did not report a completed all-reduce \(coll.allreduce\)$'
	# --json: the dead task's "gone"
	check2 "$d/json" "" CUEMU_NCCL_KILL_AT=40 --timeout 30 -e 1M --json
	assert_failure 1
	/usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
r = j["ranks"]
assert r[1]["joined"] and r[1]["gone"] == "died" and "gone" not in r[0], r
c = {x["name"]: x for x in j["checks"]}["coll.allreduce"]
assert c["level"] == "FAIL" and c["message"].startswith("task 1 ("), c' "$output"
}

# The same where NCCL cannot see the task die: within a node its kernels
# spin on a dead peer's shared memory and no error comes (cuemu's NCCL with
# CUEMU_NCCL_SILENT holds the stream until ncclCommAbort, and aborts the
# program on a call that would block on it, as cudaFree would hang on a
# GPU).  Task 0's wait asks the store every half second, aborts the
# communicator before freeing its buffers, and reports within seconds
# (it waited for --timeout, then hung in cudaFree).
@test "a task killed where NCCL cannot see it: task 0 asks the store, aborts NCCL and reports within seconds (cuemu)" {
	local d="$BATS_TEST_TMPDIR"
	check2 "$d/silent" CUEMU_NCCL_SILENT=1 CUEMU_NCCL_KILL_AT=40 --timeout 30 -e 1M
	assert_failure 1
	echo "task 0 took $(cat "$d/silent.secs") s"
	[ "$(cat "$d/silent.secs")" -le 10 ]
	[[ $stderr == *"silent (CUEMU_NCCL_SILENT): its stream held until ncclCommAbort"* ]]
	assert_line --regexp '^FAIL +coll.allreduce +task 1 \([^)]+\) died before it reported its result \(its connection to the rendezvous closed: killed, or crashed\); task 0 \([^)]+\): bandwidth sweep failed: NCCL all-reduce: task 1 died \(its connection to the rendezvous closed\); the communicator aborted$'
}

# Under NCCL, as under gloo: all-gather, reduce-scatter and all-to-all
# (grouped ncclSend/ncclRecv) swept beside the all-reduce, each size's
# data checked, in nccl-tests' columns (the node pairs need two nodes:
# ddp_check.bats runs them on the cluster over cuemu's NCCL).
@test "ddp-check --ddp=nccl on cuemu: all-gather, reduce-scatter and all-to-all swept and checked on two ranks" {
	check2 "$BATS_TEST_TMPDIR/ops" "" "" -e 64K --timeout 30
	[ "$(cat "$BATS_TEST_TMPDIR/ops.rc")" -eq 0 ]
	local op
	for op in all_gather reduce_scatter alltoall; do
		assert_line --regexp "^OK +coll\.$op +$op exact at every size on all 2 tasks; busbw [0-9.]+ GB/s at 65536 bytes$"
		assert_line "# $op, nccl, 2 ranks, 5 warm-up and 20 timed iterations, the slowest rank's time; #wrong: elements of the checked run"
	done
	# the last row of each: 65536 bytes, 16384 floats, none wrong
	[ "$(grep -cE '^ +65536 +16384 +float +(none|sum) +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' <<<"$output")" -eq 3 ]
	assert_line --regexp '^SKIP +net.pairs +one node: no link between nodes to time$'
}

# A collective whose data arrives wrong on one task (cuemu's NCCL gives the
# last rank one element off by one in each reduce-scatter,
# CUEMU_NCCL_WRONG) is named with its task, node and count, and counted in
# the table's #wrong; the others stay OK.
@test "ddp-check --ddp=nccl on cuemu: a reduce-scatter that delivers a wrong element is named with its task and count" {
	check2 "$BATS_TEST_TMPDIR/wrong" CUEMU_NCCL_WRONG=reduce-scatter CUEMU_NCCL_WRONG=reduce-scatter -e 1K --timeout 30
	assert_failure 1
	assert_line --regexp '^FAIL +coll.reduce_scatter +reduce_scatter: WRONG data: task 1 \([^)]+\): 1 of 1 elements wrong at 8 bytes; .*; task 1 \([^)]+\): 1 of 128 elements wrong at 1024 bytes$'
	assert_line --regexp '^OK +coll.all_gather +all_gather exact at every size on all 2 tasks; '
	assert_line --regexp '^OK +coll.alltoall +alltoall exact at every size on all 2 tasks; '
	assert_line --regexp '^ +1024 +256 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +1$'
}

# hw.h2d: each task copies --h2d-bytes from pinned memory to its GPU
# (cuemu's cudaMemcpy: a memcpy, some GB/s) and holds the figure against
# what its GPU's link carries, read from a crafted sysfs (DDP_CHECK_SYSFS):
# task 0's GPU on a 2.5 GT/s x1 link (0.25 GB/s: any copy is above half of
# it), task 1's on 64 GT/s x16 (121 GB/s: no memcpy reaches half of it).
@test "hw.h2d on cuemu: a GPU whose copies reach a fraction of its PCIe link fails, named with its link; --h2d-bytes 0 skips" {
	local fs="$BATS_TEST_TMPDIR/sys"
	fake_pci "$fs" 0000:00:00.0 "2.5 GT/s PCIe" 1 "2.5 GT/s PCIe" 1
	fake_pci "$fs" 0000:01:00.0 "64.0 GT/s PCIe" 16 "64.0 GT/s PCIe" 16
	check2 "$BATS_TEST_TMPDIR/h2d" "DDP_CHECK_SYSFS=$fs" "DDP_CHECK_SYSFS=$fs" -e 4K --timeout 30
	assert_failure 1
	assert_line --regexp '^FAIL +hw.h2d +task 1 \([^)]+\): GPU 0000:01:00.0: host-to-device [0-9.]+ GB/s, [0-9]+% of its link'"'"'s 121.0 GB/s \(64.0 GT/s PCIe x16; --min-h2d 50%\): a slow path to the GPU '
	refute_output --regexp 'task 0 \([^)]+\): GPU 0000:00:00.0: host-to-device'
	# the figure in the JSON's ranks
	check2 "$BATS_TEST_TMPDIR/json" "DDP_CHECK_SYSFS=$fs" "DDP_CHECK_SYSFS=$fs" -e 4K --timeout 30 --json
	/usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
assert all(r["h2d_gbps"] > 0.125 for r in j["ranks"]), j["ranks"]' "$output"
	check2 "$BATS_TEST_TMPDIR/off" "DDP_CHECK_SYSFS=$fs" "DDP_CHECK_SYSFS=$fs" -e 4K --timeout 30 --h2d-bytes 0
	assert_line --regexp '^SKIP +hw.h2d +--h2d-bytes 0: not measured$'
	[ "$(cat "$BATS_TEST_TMPDIR/off.rc")" -eq 0 ]
}

# gpu.p2p_bw: the node's first task times copies between every two GPUs
# it sees (cudaMemcpyPeer), nvbandwidth's matrix; cuemu gives each rank 4
# devices (CUEMU_DEVICES) and holds the pair 1-2 to 0.02 GB/s
# (CUEMU_PEER_GBPS), a pair through the host beside the others' memcpy.
@test "gpu.p2p_bw on cuemu: the GPU pairs' matrix of one node; a slow pair is named with both GPUs" {
	local devs="CUEMU_DEVICES=4 CUEMU_PEER_GBPS=1-2:0.02"
	check2 "$BATS_TEST_TMPDIR/p2p" "$devs" "$devs" -e 4K --timeout 30 --p2p-bytes 2M --min-p2p 5 --h2d-bytes 0
	assert_failure 1
	assert_line --regexp '^FAIL +gpu.p2p_bw +[^ ]+: GPU 0000:01:00.0 -> GPU 0000:02:00.0 0.0 GB/s, 0% of the node'"'"'s best pair \([0-9.]+ GB/s; --min-p2p 5%\); [^ ]+: GPU 0000:02:00.0 -> GPU 0000:01:00.0 0.0 GB/s, 0% of the node'"'"'s best pair \([0-9.]+ GB/s; --min-p2p 5%\)$'
	assert_line --regexp "^# GPU copies on [^ ]+, 2097152 bytes each, the best of 3 \(GB/s, from the row's GPU to the column's\)$"
	assert_line --regexp '^  0000:01:00.0 +[0-9.]+ +- +0\.02 +[0-9.]+$'
	# without the slow pair: OK, 12 pairs on the one node (task 0's)
	check2 "$BATS_TEST_TMPDIR/ok" CUEMU_DEVICES=4 CUEMU_DEVICES=4 -e 4K --timeout 30 --p2p-bytes 2M --min-p2p 5 --h2d-bytes 0
	assert_line --regexp '^OK +gpu.p2p_bw +12 GPU pairs on 1 node at [0-9.]+\.\.[0-9.]+ GB/s each way \(2097152 bytes a copy, the best of 3\)$'
	check2 "$BATS_TEST_TMPDIR/off" "" "" -e 4K --timeout 30 --p2p-bytes 0 --h2d-bytes 0
	assert_line --regexp '^SKIP +gpu.p2p_bw +--p2p-bytes 0: not measured$'
	# one device a task: nothing to time
	check2 "$BATS_TEST_TMPDIR/one" "" "" -e 4K --timeout 30 --h2d-bytes 0
	assert_line --regexp "^OK +gpu.p2p_bw +no node's first task sees two GPUs: no pair to time$"
}
