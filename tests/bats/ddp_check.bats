#!/usr/bin/env bats
# ddp-check on a real 3-node Slurm: a healthy step is all OK, and each fault
# the harness injects is named by the check that must name it, with exit
# status 1 and no hang (every srun is bounded by crun's timeout, every wait
# inside ddp-check by --timeout).
# bats file_tags=slurm

load helpers

cluster_file 3

setup() {
	cluster_paths
	CHECK="$REPO/build/bin/ddp-check"
	# small sweeps: the VM's 2 cores carry every node; a node pair is held
	# to 25% of the best (a loaded moment); the tests of a slow node keep
	# net.pairs' default of 50%
	ARGS=(-e 256K -n 5 -w 1 --timeout 15 --min-pair 25)
}

teardown() {
	restore_conf
	# faults this file injects, undone whatever happened
	"$CLUSTER" node 2 ip route del blackhole "$(node_ip 3)/32" 2>/dev/null || true
	"$CLUSTER" node 2 ip link set enp2s0 mtu 1500 2>/dev/null || true
	"$CLUSTER" node 3 ip link set enp3s0 mtu 1500 2>/dev/null || true
	"$CLUSTER" node 3 tc qdisc del dev enp3s0 root 2>/dev/null || true
	if [ -n "${SQUATTER:-}" ]; then kill "$SQUATTER" 2>/dev/null || true; fi
	stop_logind
	if [ -n "${HEALTH_CHECK:-}" ]; then health_check_off; fi
}

# slurm.conf's HealthCheckProgram: a script that runs ddp-check --node $1
# with node N's crafted sysfs ($2/nodeN), every 5 s; slurmd gives it
# SLURMD_NODENAME and no other environment.
health_check_on() {
	local prog="$BATS_TEST_TMPDIR/health-check"
	printf '#!/bin/sh
export PATH=%s SLURM_CONF=%s
export DDP_CHECK_SYSFS=%s/$SLURMD_NODENAME DDP_CHECK_NVIDIA_GPUS=/nonexistent
exec %s --node %s >>%s/hc.$SLURMD_NODENAME 2>&1
' \
		"$PATH" "$DIR/etc/slurm.conf" "$2" "$CHECK" "$1" "$BATS_TEST_TMPDIR" >"$prog"
	chmod 755 "$prog" "$BATS_TEST_TMPDIR"
	HEALTH_CHECK=1
	printf 'HealthCheckProgram=%s\nHealthCheckInterval=5\n' "$prog" >>"$DIR/etc/slurm.conf"
	crun_root scontrol reconfigure
}

health_check_off() {
	sed -i '/^HealthCheck/d' "$DIR/etc/slurm.conf"
	crun_root scontrol reconfigure || true
	crun_root scontrol update NodeName=node2 State=RESUME 2>/dev/null || true
	HEALTH_CHECK=
}

# A stand-in for logind on a private system bus (tests/tools/fake_logind.py)
# answering RemoveIPC=$1; its address in BUS for the tasks' environment.
# The folder is reachable by any user: the tasks may run as nobody.
start_logind() {
	LOGIND_DIR=$(mktemp -d /tmp/ddp-logind.XXXXXX)
	chmod 755 "$LOGIND_DIR"
	/usr/bin/python3 "$REPO/tests/tools/fake_logind.py" "$LOGIND_DIR" "$1" >"$LOGIND_DIR/out" 2>&1 &
	LOGIND=$!
	for _ in $(seq 50); do
		grep -q '^ready ' "$LOGIND_DIR/out" && break
		sleep 0.1
	done
	cat "$LOGIND_DIR/out"
	BUS=$(sed -n 's/^ready //p' "$LOGIND_DIR/out")
	[ -n "$BUS" ]
}

stop_logind() {
	if [ -n "${LOGIND:-}" ]; then
		kill "$LOGIND" 2>/dev/null || true
		wait "$LOGIND" 2>/dev/null || true
		LOGIND=
	fi
	if [ -n "${LOGIND_DIR:-}" ]; then rm -rf "$LOGIND_DIR"; LOGIND_DIR=; fi
}

@test "a healthy 3-node step: every check OK, placement lines in rank order, the bandwidth table" {
	run crun srun -N3 --ntasks-per-node=2 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_output --regexp "# ddp-check [0-9.]+: backend gloo, world size 6 on 3 nodes, head node1 \(MASTER_ADDR=$(node_ip 1) MASTER_PORT=[0-9]+\)"
	# one placement line per rank, in rank order, each on its node
	for r in 0 1 2 3 4 5; do
		assert_output --regexp "
 +$r +node$((r / 2 + 1)) +[0-9]+ +enp$((r / 2 + 1))s0 +$(node_ip $((r / 2 + 1))) +- +[01] +0
"
	done
	assert_output --regexp "# +size +count +type +redop +time +algbw +busbw"
	assert_output --regexp "
 +262144 +65536 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+
"
	for c in rdzv.join env.present env.rank env.world_size env.master env.local_rank env.node_rank \
		env.head env.nccl net.iface net.kind net.probe net.memlock net.nofile net.shm clock.skew bind.cpus bind.threads bind.nproc bind.locality bind.gpus bind.gres \
		bind.visible coll.backend slurm.kill_wait coll.allreduce coll.busbw time.first_collective gpu.health gpu.p2p; do
		assert_line --regexp "^OK +$c +"
	done
	assert_line --regexp "^OK +net.probe +every node reached every other \(6 connections"
	assert_line --regexp "^OK +coll.allreduce +gloo all-reduce of crafted inputs exact on all 6 tasks"
	# the harness's slurm.conf has KillWait=10
	assert_line --regexp "^OK +slurm.kill_wait +KillWait=10: a task has 10 s from SIGTERM to SIGKILL \(scancel, requeue, preemption, time limit\) to stop and write its checkpoint$"
	assert_line --regexp "^OK +net.pairs +3 node pairs of 3 nodes: [0-9.]+\\.\\.[0-9.]+ GB/s each way \\(16777216 bytes each way, the best of 5; each at least 25% of the best\\)$"
	for c in coll.all_gather coll.reduce_scatter coll.alltoall; do
		assert_line --regexp "^OK +$c +[a-z_]+ exact at every size on all 6 tasks; busbw [0-9.]+ GB/s at 262128 bytes$"
	done
	assert_line "ddp-check: 38 checks OK, 0 WARN, 0 FAILED"
}

@test "slurm.kill_wait: KillWait under --min-kill-wait warns; a task whose SLURM_CONF names nothing has a SKIP at once" {
	run crun srun -N2 --ddp=gloo "$CHECK" "${ARGS[@]}" --min-kill-wait 30
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +slurm.kill_wait +KillWait=10: a task has 10 s from SIGTERM to SIGKILL .*, less than --min-kill-wait 30: a trainer that stops to write its checkpoint .* raise KillWait in slurm.conf \(Slurm's default is 30\)"
	assert_line "ddp-check: 37 checks OK, 1 WARN, 0 FAILED"
	# libslurm would retry a slurm.conf it cannot stat for 60 s, then call
	# fatal(): task 0 does not ask, and says why
	SECONDS=0
	run crun srun -N2 --ddp=gloo env SLURM_CONF=/nonexistent/slurm.conf "$CHECK" -e 4K -n 2 -w 1 --timeout 10
	echo "$output"
	assert_success
	[ "$SECONDS" -lt 10 ]
	assert_line --regexp "^SKIP +slurm.kill_wait +KillWait not read: SLURM_CONF=/nonexistent/slurm.conf: No such file or directory$"
	assert_line "ddp-check: 37 checks OK, 0 WARN, 0 FAILED, 1 skipped"
}

@test "one node made slow (tc tbf on its interface): net.pairs names it, not its links; the other collectives' tables, #wrong 0" {
	# 40 Mbit/s out of node3: about 5 MB/s, against the veths' GB/s
	"$CLUSTER" node 3 tc qdisc add dev enp3s0 root tbf rate 40mbit burst 64kb latency 2s
	run crun srun -N3 --ddp=gloo "$CHECK" -e 16K -n 2 -w 1 --timeout 30 --pair-bytes 512K
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.pairs +node node3 is slow: its 2 pairs at 0\.0[0-9]+\.\.0\.0[0-9]+ GB/s each way, the other pairs at [0-9.]+\.\.[0-9.]+ \(--min-pair 50% of the best pair, [0-9.]+ GB/s\)$"
	refute_output --partial "the link node"
	assert_output --regexp "# node pairs, 524288 bytes each way at once, the best of 5 \(GB/s each way\)"
	for op in all_gather reduce_scatter alltoall; do
		assert_output --partial "# $op, gloo, 3 ranks, 1 warm-up and 2 timed iterations"
		assert_line --regexp "^OK +coll\.$op +$op exact at every size on all 3 tasks; busbw [0-9.]+ GB/s at 16380 bytes$"
	done
	# each table's last row: 16380 bytes (1365 floats a task), none wrong
	assert_line --regexp "^ +16380 +4095 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
	assert_line --regexp "^ +16380 +4095 +float +none +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
}

# The same under NCCL, on cuemu's CUDA runtime and NCCL (no GPU here:
# tests/Makefile's build/tests/cuemu/lib, loaded as ddp-check loads the
# real ones): the pairs exchange through grouped ncclSend/ncclRecv, over
# cuemu's connections between the ranks, which node3's tbf slows.
@test "under NCCL (cuemu's libraries): one node made slow is named by net.pairs; all-gather, reduce-scatter and all-to-all checked" {
	local emu="$REPO/build/tests/cuemu/lib"
	[ -e "$emu/libnccl.so.2" ] || skip "no cuemu libraries ($emu): CUDA's headers are missing here (see tests/Makefile)"
	"$CLUSTER" node 3 tc qdisc add dev enp3s0 root tbf rate 40mbit burst 64kb latency 2s
	run crun srun -N3 --gres=gpu:1 --ddp=nccl bash -c \
		"CUEMU_PCI_BUS=\$SLURM_NODEID LD_LIBRARY_PATH=$emu exec $CHECK -e 16K -n 2 -w 1 --timeout 30 --pair-bytes 512K"
	echo "$output"
	assert_failure 1
	assert_line --regexp '^OK +coll.backend +NCCL [0-9.]+ and a GPU on every task$'
	assert_line --regexp "^FAIL +net.pairs +node node3 is slow: its 2 pairs at 0\.0[0-9]+\.\.0\.0[0-9]+ GB/s each way, the other pairs at [0-9.]+\.\.[0-9.]+ \(--min-pair 50% of the best pair, [0-9.]+ GB/s\)$"
	refute_output --partial "the link node"
	local op
	for op in all_gather reduce_scatter alltoall; do
		assert_output --partial "# $op, nccl, 3 ranks, 1 warm-up and 2 timed iterations"
		assert_line --regexp "^OK +coll\.$op +$op exact at every size on all 3 tasks; busbw [0-9.]+ GB/s at 16380 bytes$"
	done
	assert_line --regexp "^ +16380 +4095 +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
	assert_line --regexp "^ +16380 +4095 +float +none +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$"
}

@test "--json writes the same report as one JSON object" {
	run --separate-stderr crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}" --json
	echo "$output"
	assert_success
	run python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"] == "gloo" and r["world_size"] == 3 and r["nodes"] == 3, r
assert [x["rank"] for x in r["ranks"]] == [0, 1, 2]
assert [x["host"] for x in r["ranks"]] == ["node1", "node2", "node3"]
assert all(x["joined"] and x["cpus"] and x["iface"] for x in r["ranks"])
assert r["bandwidth"] and r["bandwidth"][-1]["size"] == 262144, r["bandwidth"]
b = r["bandwidth"][-1]
assert abs(b["busbw"] - b["algbw"] * 2 * 2 / 3) < 1e-3, b
names = [c["name"] for c in r["checks"]]
assert len(names) == 38 and "hw.h2d" in names and "gpu.p2p_bw" in names and "gpu.health" in names and "gpu.p2p" in names and "net.pairs" in names and "coll.alltoall" in names and "hw.pcie" in names and "net.fabric" in names and "slurm.kill_wait" in names and "net.shm" in names and "bind.threads" in names and "bind.nproc" in names and "env.nccl" in names and "net.memlock" in names and "net.nofile" in names and "net.probe" in names and "bind.gres" in names and "clock.skew" in names, names
assert all(c["level"] == "OK" for c in r["checks"]), r["checks"]
# tasks of root: no process limit holds them, and their threads are not counted
assert all(x["user_threads"] is None for x in r["ranks"]), r["ranks"]
assert r["kill_wait"] == 10, r["kill_wait"]
assert r["summary"] == {"ok": 38, "warn": 0, "fail": 0, "skip": 0} and r["exit_code"] == 0
assert r["gpu_pairs"] == [], r["gpu_pairs"]
assert set(r["collectives"]) == {"all_gather", "reduce_scatter", "alltoall"}, r["collectives"]
for op, rows in r["collectives"].items():
    assert rows and rows[-1]["size"] == 262140 and all(x["wrong"] == 0 for x in rows), (op, rows)
    assert abs(rows[-1]["busbw"] - rows[-1]["algbw"] * 2 / 3) < 1e-3, rows[-1]
assert sorted((p["a"], p["b"]) for p in r["pairs"]) == [("node1", "node2"), ("node1", "node3"), ("node2", "node3")], r["pairs"]
assert all(p["gbps"] > 0 for p in r["pairs"]), r["pairs"]
print("json ok")' "$output"
	assert_success
	assert_output "json ok"
}

@test "--baseline: a recorded --json report; below --min-baseline of it fails naming each size, another shape warns" {
	run --separate-stderr crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}" --json
	assert_success
	# the recorded run scaled, so that this VM's noise decides nothing: a
	# thousand times slower (OK), a thousand times faster (FAIL)
	/usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
for name, f in (("slow", 1e-3), ("fast", 1e3)):
    s = json.loads(sys.argv[1])
    for b in s["bandwidth"]:
        b["busbw"] = b["busbw"] * f if b["busbw"] > 0 else 0
    json.dump(s, open(sys.argv[2] + "/" + name + ".json", "w"))' "$output" "$BATS_TEST_TMPDIR"
	run crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}" --baseline "$BATS_TEST_TMPDIR/slow.json"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +coll.baseline +every one of [0-9]+ sizes at least 80% of .*/slow.json's busbw"
	run crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}" --baseline "$BATS_TEST_TMPDIR/fast.json"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +coll.baseline +below 80% of .*/fast.json: [0-9]+ bytes: busbw [0-9.]+ GB/s, [0-9]+% of the baseline's [0-9.]+"
	run crun srun -N2 --ddp=gloo "$CHECK" "${ARGS[@]}" --baseline "$BATS_TEST_TMPDIR/fast.json"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +coll.baseline +.*/fast.json was recorded at world size 3 on 3 nodes under gloo, this step is 2 on 2 under gloo: its busbw is not comparable"
}

@test "a cut route between two nodes: net.probe names both directions, collectives are skipped, exit 1" {
	# node2 drops everything for node3: node2's connects fail at once,
	# node3's get no answer back.
	"$CLUSTER" node 2 ip route add blackhole "$(node_ip 3)/32"
	SECONDS=0
	run crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_failure 1
	[ "$SECONDS" -lt 40 ]
	assert_line --regexp "^FAIL +net.probe +.*node2 cannot reach node3 at $(node_ip 3):[0-9]+: no route to it from here"
	assert_line --regexp "^FAIL +net.probe +.*node3 cannot reach node2 at $(node_ip 2):[0-9]+: no answer within 2000 ms"
	assert_line --regexp "^SKIP +coll.allreduce +not run: net.probe failed"
	assert_line --regexp "^OK +rdzv.join "
	assert_line --regexp "^ddp-check: [0-9]+ checks OK, 0 WARN, 1 FAILED, 7 skipped$"
}

@test "jumbo frames on two nodes that the bridge between does not carry: net.probe names the lost full-size packets and both MTUs, exit 1" {
	# node2 and node3 send 9000-byte frames, which the bridge's 1500-byte
	# ports drop (a switch without jumbo frames): connections open and small
	# messages pass, and gloo's first large transfer between them would
	# hang until its timeout.  node1 stays at 1500 (TCP's MSS keeps its
	# connections to the others small enough).
	"$CLUSTER" node 2 ip link set enp2s0 mtu 9000
	"$CLUSTER" node 3 ip link set enp3s0 mtu 9000
	SECONDS=0
	run crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_failure 1
	[ "$SECONDS" -lt 40 ]
	assert_line --regexp "^OK +net.iface +.* on every task; MTU 1500 on node1; 9000 on node2, node3$"
	local a b
	for a in 2 3; do
		b=$((5 - a))
		assert_line --regexp "^FAIL +net.probe +.*node$a cannot reach node$b at $(node_ip "$b"):[0-9]+: greeted, but its reply in one full-size packet \(89[0-9]{2} bytes of TCP payload\) did not come within 2000 ms: packets of the interfaces' MTU are lost on the way \(a link, switch or bridge between with a smaller MTU\); MTU 9000 on enp${a}s0 \(node$a\), 9000 on enp${b}s0 \(node$b\)"
	done
	refute_output --regexp "node1 cannot reach|cannot reach node1"
	assert_line --regexp "^SKIP +coll.allreduce +not run: net.probe failed"
}

@test "a user's MASTER_PORT already taken on the head: task 0 says so, every other task reports locally, exit 1" {
	"$CLUSTER" node 1 python3 -c '
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29777))
s.listen()
time.sleep(60)' &
	SQUATTER=$!
	sleep 1
	SECONDS=0
	MASTER_PORT=29777 run crun srun -N3 --ddp=gloo "$CHECK" "${ARGS[@]}" --timeout 5
	echo "$output"
	assert_failure 1
	[ "$SECONDS" -lt 40 ]
	assert_line --regexp "^# ddp-check [0-9.]+: backend gloo, world size 3 on 3 nodes \(1 reported\), head node1 "
	assert_line --regexp "^FAIL +rdzv.join +task 0 \(node1\): rank 0 could not listen on port 29777: Address already in use"
	assert_line --regexp "^ddp-check: task 1 \(node2\): FAIL rdzv.join: .*$(node_ip 1):29777"
	assert_line --regexp "^ddp-check: task 2 \(node3\): FAIL rdzv.join: .*$(node_ip 1):29777"
	assert_line "ddp-check: 0 checks OK, 0 WARN, 1 FAILED"
}

@test "a wrong GLOO_SOCKET_IFNAME on one node: net.iface names the node and the interfaces it has, exit 1" {
	run crun srun -N3 --ddp=gloo bash -c \
		"[ \$SLURM_NODEID = 2 ] && export GLOO_SOCKET_IFNAME=eth9; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.iface +task 2 \(node3\): GLOO_SOCKET_IFNAME=eth9: no such interface there \(it has lo, enp3s0, docker0\)$"
	assert_line --regexp "^SKIP +coll.allreduce +not run: net.iface failed"
}

@test "a container bridge named on one node (docker0): net.iface and net.probe say so, exit 1" {
	# every node has a decoy docker0 (172.17.0.1/16, no ports)
	run crun srun -N2 --ddp=gloo bash -c \
		"[ \$SLURM_NODEID = 1 ] && export GLOO_SOCKET_IFNAME=docker0; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.iface +task 1 \(node2\): GLOO_SOCKET_IFNAME=docker0 is a container or virtual bridge \(172.17.0.1\): other nodes cannot reach it$"
	assert_line --regexp "^FAIL +net.probe +node1 cannot reach node2 at 172.17.0.1:[0-9]+"
}

@test "a task with an inconsistent WORLD_SIZE: env.world_size names it and its value, exit 1" {
	run crun srun -N3 --ntasks-per-node=1 --ddp=gloo bash -c \
		"[ \$SLURM_PROCID = 1 ] && export WORLD_SIZE=5; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +env.world_size +differs between tasks: WORLD_SIZE=5 on task 1 \(node2\); WORLD_SIZE=3 on task 0 \(node1\), task 2 \(node3\)$"
	# the check's own collectives use Slurm's task ids: they still run
	assert_line --regexp "^OK +coll.allreduce "
}

@test "a task with a wrong RANK: env.rank names both tasks holding it" {
	run crun srun -N3 --ddp=gloo bash -c \
		"[ \$SLURM_PROCID = 2 ] && export RANK=1; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +env.rank +RANK=1 on both task 1 \(node2\) and task 2 \(node3\)$"
}

@test "a task that cannot reach the rendezvous reports its own failure; task 0 names it, no hang" {
	SECONDS=0
	run crun srun -N3 --ddp=gloo bash -c \
		"[ \$SLURM_PROCID = 1 ] && export MASTER_PORT=1; exec $CHECK ${ARGS[*]} --timeout 4"
	echo "$output"
	assert_failure 1
	[ "$SECONDS" -lt 40 ]
	assert_line --regexp "^ddp-check: task 1 \(node2\): FAIL rdzv.join: rank 1 could not reach $(node_ip 1):1 after 4 s: Connection refused$"
	assert_line --regexp "^FAIL +rdzv.join +task 1 \(of 3\) never joined the rendezvous at $(node_ip 1):[0-9]+ within 4 s"
	assert_line --regexp "^ +1  \?  +\(never joined the rendezvous\)$"
	assert_line --regexp "^FAIL +env.master +differ between tasks: MASTER_PORT|^OK +env.node_rank "
	assert_line --regexp "^SKIP +coll.allreduce +not run: rdzv.join failed"
}

@test "overlapping CPU binding: bind.cpus names the tasks, the CPUs and the idle ones, exit 1" {
	run crun srun -N2 --ntasks-per-node=2 --ddp=gloo bash -c "exec taskset -c 0 $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +bind.cpus +node1: task 0 \(CPUs 0\) and task 1 \(CPUs 0\) overlap on 0, while no task uses CPUs 1; node2: task 2 \(CPUs 0\) and task 3 \(CPUs 0\) overlap on 0, while no task uses CPUs 1$"
}

@test "unbound tasks (--ddp-bind=none) are a warning, not a failure" {
	run crun srun -N1 --ntasks-per-node=2 --ddp=gloo --ddp-bind=none "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.cpus +node1: 2 tasks are not bound, each may run on all of CPUs 0-1"
	assert_line --regexp "^SKIP +net.pairs +one node: no link between nodes to time$"
	assert_line --regexp "^ddp-check: 36 checks OK, 1 WARN, 0 FAILED, 1 skipped$"
}

@test "GPU binding (fake GPUs, the nodes' topology): bus ids, locality, one task per GPU, strict narrows visibility" {
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$CONF"
	run crun srun -N2 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	# testnode.xml: GPUs at buses 20, 30 (near CPU 0) and 60, 70 (near CPU 1)
	assert_output --regexp "
 +0 +node1 +[0-9]+ +enp1s0 +[0-9.]+ +0000:20:00.0 +0 +0
 +1 +node1 +[0-9]+ +enp1s0 +[0-9.]+ +0000:60:00.0 +1 +0
"
	assert_line --regexp "^OK +bind.cpus +every task has CPUs of its own"
	assert_line --regexp "^OK +bind.locality +each of 4 tasks runs on CPUs near its GPU$"
	assert_line --regexp "^WARN +bind.gpus +node1: 2 of the step's 4 GPUs there are used by no task; node2: 2 of"
	assert_line --regexp "^OK +bind.visible +every task sees all of its node's GPUs"
	# two tasks on two GPUs near one CPU: the plan shares it, and says why
	run crun srun -N1 --ntasks-per-node=2 --gres=gpu:2 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.cpus +node1: tasks 0 and 1 share CPUs 0 near their GPUs"
	assert_line --regexp "^OK +bind.gpus +each of 2 GPUs is used by exactly one task$"
	run crun srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo --ddp-bind=strict "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.visible +task 0 \(node1\) sees 1 of the step's 4 GPUs there: no CUDA peer access"
	assert_line --regexp "^WARN +bind.gpus +node1: 2 of the step's 4 GPUs there are used by no task$"
	# --gpus-per-task=1: Slurm shows each task its own GPU; the check counts
	# the node's (DDP_SLURM_STEP_GPUS), and finds each task near its GPU
	run crun srun -N1 --ntasks-per-node=2 --gpus-per-task=1 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.visible +task 0 \(node1\) sees 1 of the step's 2 GPUs there: no CUDA peer access .* narrowed by --gpus-per-task"
	assert_line --regexp "^OK +bind.locality +each of 2 tasks runs on CPUs near its GPU$"
	assert_line --regexp "^OK +bind.gpus +each of 2 GPUs is used by exactly one task$"
}

@test "gpu.health and gpu.p2p in a step (fake GPUs, NVML through the project's stand-in): each task's GPU read; node2's ECC errors and an Xid named; peer reads; drivers that differ between nodes a warning" {
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$CONF"
	local nv="$BATS_TEST_TMPDIR/nvml" log="$BATS_TEST_TMPDIR/kmsg"
	printf 'driver 550.54.15\ncuda 12040\ngpu 0000:20:00.0\ngpu 0000:60:00.0\n' >"$nv.1"
	printf 'driver 550.54.15\ncuda 12040\ngpu 0000:20:00.0 ecc_vol=7\ngpu 0000:60:00.0\n' >"$nv.2"
	printf 'driver 535.104.05\ncuda 12020\ngpu 0000:20:00.0\ngpu 0000:60:00.0\n' >"$nv.3"
	: >"$log.1"
	printf '4,9,10,-;NVRM: Xid (PCI:0000:60:00): 94, pid=77, Contained: SM (0x1). RST: No, D-RST: No\n' >"$log.2"
	# each node's task reads its own node's answers
	# the driver's list: the peers gpu.p2p asks each task's GPU about
	fake_nvidia "$BATS_TEST_TMPDIR/nvidia" 0000:20:00.0 0000:30:00.0 0000:60:00.0 0000:70:00.0
	local task="n=\${SLURMD_NODENAME#node}; export LD_LIBRARY_PATH=$REPO/build/tests/tools/nvml FAKE_NVML=$nv.\$n DDP_CHECK_KMSG=$log.\$((n == 2 ? 2 : 1)) DDP_CHECK_NVIDIA_GPUS=$BATS_TEST_TMPDIR/nvidia; exec $CHECK ${ARGS[*]}"
	run crun srun -N2 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo bash -c "$task"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +gpu.health +node2 GPU 0000:20:00.0 \(task 2\): 7 uncorrected ECC errors since the driver loaded; node2 GPU 0000:60:00.0 \(task 3\): Xid 94 in the kernel's log since boot \(its Xids: 94\)$"
	refute_line --regexp "^FAIL +gpu.health +.*node1"
	# the first node healthy alone
	run crun srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo bash -c "$task"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +gpu.health +2 GPUs read by NVML \(driver 550.54.15, CUDA 12040\): no uncorrected ECC error"
	# its two GPUs read each other's memory (the fake GPUs 30 and 70, unknown to NVML, not judged)
	assert_line --regexp "^OK +gpu.p2p +2 GPUs: peer reads between every two of a node's \(2 pairs both ways\); no NVLink$"
	# node3 on another driver than node1: a warning
	run crun srun -w node1,node3 --ntasks-per-node=1 --gres=gpu:1 --ddp=gloo bash -c "$task"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +gpu.health +drivers differ: node1 has 550.54.15 \(CUDA 12040\), node3 has 535.104.05 \(CUDA 12020\)$"
}

@test "bind.gres: Slurm's GPU numbers against the NVIDIA driver's bus ids (a faked driver list)" {
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$CONF"
	NV="$BATS_TEST_TMPDIR/nvidia-gpus"
	# no driver list: the check says what it could not do
	run crun srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^SKIP +bind.gres +no node has the NVIDIA driver's GPU list"
	# /dev/nvidiaN is the N-th GPU by bus id (testnode.xml's 20, 30, 60, 70): OK
	fake_nvidia "$NV" 0000:20:00.0 0000:30:00.0 0000:60:00.0 0000:70:00.0
	run crun env DDP_CHECK_NVIDIA_GPUS="$NV" srun -N2 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +bind.gres +the NVIDIA driver's device numbers follow PCI bus order on 2 nodes, and every task's GPU is one Slurm gave the step$"
	# the driver numbered the first two the other way round: Slurm's numbers
	# in bus order (gres_order bus, AutoDetect=nvml's) are still CUDA's
	fake_nvidia "$NV" 0000:30:00.0 0000:20:00.0 0000:60:00.0 0000:70:00.0
	run crun env DDP_CHECK_NVIDIA_GPUS="$NV" srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +bind.gres +Slurm's GPU numbers taken in PCI bus order \(gres_order bus, as AutoDetect=nvml numbers them\) on 1 node, where the NVIDIA driver's device numbers do not follow bus order \(node1: a gres.conf listing File=/dev/nvidia\[0-N\] there needs gres_order: minor\)"
	# ... but by minor (this cluster's hand-written gres.conf: gres_order minor) they are not
	sed -i "s|^gres_order: .*|gres_order: minor|" "$CONF"
	run crun env DDP_CHECK_NVIDIA_GPUS="$NV" srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.gres +node1: gres_order minor, and the NVIDIA driver's device numbers do not follow PCI bus order \(0000:20:00.0 is /dev/nvidia1, 0000:30:00.0 is /dev/nvidia0, 0000:60:00.0 is /dev/nvidia2, 0000:70:00.0 is /dev/nvidia3\)"
	sed -i "s|^gres_order: .*|gres_order: bus|" "$CONF"
	# two of the four GPUs: each task's GPU (the plugin's DDP_GPU_BUSID) is one of them
	fake_nvidia "$NV" 0000:20:00.0 0000:30:00.0 0000:60:00.0 0000:70:00.0
	run crun env DDP_CHECK_NVIDIA_GPUS="$NV" srun -N1 --ntasks-per-node=2 --gres=gpu:2 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +bind.gres +the NVIDIA driver's device numbers follow PCI bus order on 1 node, and every task's GPU is one Slurm gave the step$"
	# without DDP_CHECK_NVIDIA_GPUS: the list the plugin reads (ddp.yaml nvidia_gpus)
	fake_nvidia "$NV" 0000:30:00.0 0000:20:00.0 0000:60:00.0 0000:70:00.0
	sed -i "s|^nvidia_gpus: .*|nvidia_gpus: $NV|; s|^gres_order: .*|gres_order: minor|" "$CONF"
	run crun srun -N1 --ntasks-per-node=2 --gres=gpu:4 --ddp=gloo "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.gres +node1: gres_order minor, and the NVIDIA driver's device numbers do not follow PCI bus order \(0000:20:00.0 is /dev/nvidia1, "
	assert_line --regexp "srun --ddp writes CUDA_VISIBLE_DEVICES as CUDA counts"
}

@test "--min-busbw above what the network gives is a failure naming the figure" {
	run crun srun -N2 --ddp=gloo "$CHECK" "${ARGS[@]}" --min-busbw 100000
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +coll.busbw +busbw [0-9.]+ GB/s at 262144 bytes is below --min-busbw 100000.00 GB/s$"
}

@test "--ddp=nccl on nodes without a GPU: coll.backend says what is missing, the other checks still run" {
	# and NCCL_SOCKET_IFNAME is read as NCCL reads it (a prefix, =exact, ^excluded)
	run crun srun -N2 --gres=gpu:1 --ddp=nccl bash -c \
		"[ \$SLURM_NODEID = 1 ] && export NCCL_SOCKET_IFNAME==ib0; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_output --regexp "# ddp-check [0-9.]+: backend nccl, world size 2 on 2 nodes"
	assert_line --regexp "^FAIL +coll.backend +task 0 \(node1\): .*(CUDA|cudart|NCCL|nccl).*; task 1 \(node2\): "
	assert_line --regexp "^ddp-check: task 1 \(node2\): FAIL coll.backend: .*(CUDA|cudart|NCCL|nccl)"
	assert_line --regexp "^FAIL +net.iface +task 1 \(node2\): NCCL_SOCKET_IFNAME=ib0: no such interface there"
	assert_line --regexp "^OK +env.rank "
	assert_line --regexp "^SKIP +coll.allreduce +not run: "
}

@test "net.memlock under NCCL: tasks beside RDMA devices with a small locked-memory limit are named, with the fix" {
	# fake RDMA devices (DDP_CHECK_INFINIBAND), and the limit Slurm hands
	# the tasks from the shell srun runs in (PropagateResourceLimits)
	mkdir -p "$BATS_TEST_TMPDIR/ib/mlx5_0" "$BATS_TEST_TMPDIR/ib/mlx5_1"
	run crun env DDP_CHECK_INFINIBAND="$BATS_TEST_TMPDIR/ib" bash -c \
		"ulimit -l 64 && srun -N2 --gres=gpu:1 --ddp=nccl $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.memlock +node1: locked memory limited to 64 KiB \(ulimit -l; task 0\) beside RDMA devices mlx5_[01],mlx5_[01]; node2: locked memory limited to 64 KiB \(ulimit -l; task 1\) .*: NCCL registers its buffers with them \(ibv_reg_mr\).* PropagateResourceLimitsExcept=MEMLOCK in slurm.conf, LimitMEMLOCK=infinity in slurmd's systemd unit$"
	# NCCL told to leave the devices alone
	run crun env DDP_CHECK_INFINIBAND="$BATS_TEST_TMPDIR/ib" NCCL_IB_DISABLE=1 bash -c \
		"ulimit -l 64 && srun -N2 --gres=gpu:1 --ddp=nccl $CHECK ${ARGS[*]}"
	assert_line --regexp "^OK +net.memlock +NCCL_IB_DISABLE=1: NCCL leaves the RDMA devices alone"
	# this machine's own: no RDMA device
	run crun bash -c "ulimit -l 64 && srun -N2 --gres=gpu:1 --ddp=nccl $CHECK ${ARGS[*]}"
	assert_line --regexp "^OK +net.memlock +no RDMA device \(InfiniBand, RoCE\) on any node"
	# and gloo pins nothing
	run crun env DDP_CHECK_INFINIBAND="$BATS_TEST_TMPDIR/ib" bash -c \
		"ulimit -l 64 && srun -N2 --ddp=gloo $CHECK ${ARGS[*]}"
	assert_success
	assert_line --regexp "^OK +net.memlock +gloo registers no memory with RDMA devices"
}

@test "net.fabric and hw.pcie from each node's sysfs: a port down and a NIC at x8 are named with their node" {
	local sys="$BATS_TEST_TMPDIR/sys"
	fake_sysfs "$sys/node1" "4: ACTIVE" 16 "200 Gb/sec (4X HDR)"
	fake_sysfs "$sys/node2" "1: DOWN" 16 "200 Gb/sec (4X HDR)"
	fake_sysfs "$sys/node3" "4: ACTIVE" 8 "200 Gb/sec (4X HDR)"
	chmod a+rx "$BATS_TEST_TMPDIR"
	run crun srun -N3 --ddp=gloo bash -c \
		"DDP_CHECK_SYSFS=$sys/\$(hostname) DDP_NIC=mlx5_0 exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +hw.pcie +node3: NIC mlx5_0 0000:3d:00.0 at x8 of x16 \(16.0 GT/s PCIe of 16.0 GT/s PCIe\): a degraded link"
	assert_line --regexp "^WARN +net.fabric +node2: DDP_NIC mlx5_0 port 1 is DOWN; node2: mlx5_0 port 1 is DOWN \(gloo runs over TCP"
	# the healthy trees: both OK, and node2's rate lower is a warning naming it
	fake_sysfs "$sys/ok1" "4: ACTIVE" 16 "200 Gb/sec (4X HDR)"
	fake_sysfs "$sys/ok2" "4: ACTIVE" 16 "100 Gb/sec (4X EDR)"
	run crun srun -N3 --ddp=gloo bash -c \
		"n=\$(hostname); DDP_CHECK_SYSFS=$sys/ok\$([ \$n = node2 ] && echo 2 || echo 1) DDP_NIC=mlx5_0 exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +hw.pcie +3 PCIe links of the step's GPUs and NICs at full width"
	assert_line --regexp "^WARN +net.fabric +node2's RDMA ports run at 100 Gb/sec \(4X EDR\) where other nodes' run at 200 Gb/sec \(4X HDR\)"
}

@test "ddp-check --node as the cluster's HealthCheckProgram: without --drain nothing drains; with it the node whose HCA port is down drains, the check its reason" {
	local sys="$BATS_TEST_TMPDIR/sys"
	fake_sysfs "$sys/node1" "4: ACTIVE" 16 "200 Gb/sec (4X HDR)"
	fake_sysfs "$sys/node2" "1: DOWN" 16 "200 Gb/sec (4X HDR)"
	fake_sysfs "$sys/node3" "4: ACTIVE" 16 "200 Gb/sec (4X HDR)"
	health_check_on "" "$sys"
	wait_line "$BATS_TEST_TMPDIR/hc.node2" "ddp-check --node node2: FAILED" 40
	cat "$BATS_TEST_TMPDIR/hc.node2"
	grep -qE "^FAIL +net.fabric +node2: mlx5_0 port 1 is DOWN$" "$BATS_TEST_TMPDIR/hc.node2"
	nodes_healthy
	health_check_off
	health_check_on --drain "$sys"
	local state=""
	for _ in $(seq 60); do
		state=$(crun_root sinfo -h -n node2 -o %T)
		case $state in drain*) break ;; esac
		sleep 1
	done
	echo "node2: $state"
	[[ $state == drain* ]]
	run crun_root scontrol show node node2
	echo "$output"
	assert_output --regexp "Reason=ddp-check net.fabric: node2: mlx5_0 port 1 is DOWN"
	run crun_root sinfo -h -n node1,node3 -o %T
	refute_output --partial drain
	health_check_off
	nodes_healthy
}

@test "net.nofile under gloo: a task's open-files limit with little room beside gloo's full mesh is a warning naming the node" {
	run crun srun -N3 --ntasks-per-node=2 --ddp=gloo bash -c \
		"[ \$SLURM_NODEID = 1 ] && ulimit -n 100; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +net.nofile +the open-files limit \(ulimit -n\) on node2: 100 \(task 2 and others\): gloo connects every rank to every other, 5 sockets a rank at world size 6, which leave little room for the program's own files \(at least 261 wanted\); .*PropagateResourceLimitsExcept=NOFILE"
	assert_line --regexp "^ddp-check: 37 checks OK, 1 WARN, 0 FAILED$"
}

# The process limit holds all of a user's threads on a node (one kernel
# here: every node's tasks count); the tasks drop to nobody, as a user's
# would run (root is not held by it).
@test "bind.nproc: a process limit with little room is a warning naming the node, none for the OpenMP threads a failure" {
	local user="setpriv --reuid=65534 --regid=65534 --clear-groups $CHECK ${ARGS[*]}"
	run crun srun -N2 --ntasks-per-node=2 --ddp=gloo bash -c "[ \$SLURM_NODEID = 1 ] && ulimit -u 60; exec $user"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.nproc +the process limit \(ulimit -u\) on node2: 60 \(task 2 and others\), [0-9]+ threads? of uid 65534 running there: room for [0-9]+, where its 2 tasks want 130 \(2 for OpenMP, 64 a task for the libraries\); .*PropagateResourceLimitsExcept=NPROC in slurm.conf$"
	refute_line --regexp "^WARN +bind.nproc +.*node1"
	# KillWait is read as uid 65534 too, who cannot read the cluster's
	# slurm.conf in a checkout under /root (0700): skipped there, saying why
	if grep -qE '^SKIP +slurm\.kill_wait +KillWait not read: SLURM_CONF=.*: Permission denied$' <<<"$output"; then
		assert_line --regexp "^ddp-check: 36 checks OK, 1 WARN, 0 FAILED, 1 skipped$"
	else
		assert_line --regexp "^ddp-check: 37 checks OK, 1 WARN, 0 FAILED$"
	fi
	# 40 OpenMP threads a task on node2: past the limit
	run crun srun -N2 --ntasks-per-node=2 --ddp=gloo bash -c \
		"[ \$SLURM_NODEID = 1 ] && ulimit -u 60 && export OMP_NUM_THREADS=40; exec $user"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +bind.nproc +the process limit \(ulimit -u\) on node2: 60 \(task 2 and others\), [0-9]+ threads? of uid 65534 running there: room for [0-9]+, and its 2 tasks want 80 for OpenMP alone; .*pthread_create and fork fail"
	# unlimited (root's own limit here, as srun's shell has it)
	run crun srun -N2 --ddp=gloo setpriv --reuid=65534 --regid=65534 --clear-groups "$CHECK" "${ARGS[@]}"
	assert_success
	assert_line --regexp "^OK +bind.nproc +(processes unlimited on every task|process limit \(ulimit -u\) at least [0-9]+ on every task; the least room on node[12]: [0-9]+ threads, 6[5-9] wanted)$"
}

# No room for a thread on node2: gloo's connect fails there at once and
# says so in the store; the other tasks, waiting for its address, stop on
# it within a second (not at --timeout), and the report comes.
@test "bind.nproc: where gloo cannot start its threads, the report still comes, naming the tasks and the cause" {
	# task 3 alone as nobody, with room for its own process only (root's
	# tasks are not held by the limit: its count is its own)
	run crun srun -N2 --ntasks-per-node=2 --ddp=gloo bash -c \
		"[ \$SLURM_PROCID = 3 ] || exec $CHECK ${ARGS[*]} --timeout 5; ulimit -u 1; exec setpriv --reuid=65534 --regid=65534 --clear-groups $CHECK ${ARGS[*]} --timeout 5"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +bind.nproc +the process limit \(ulimit -u\) on node2: 1 \(task 3\), 1 thread of uid 65534 running there: room for 0, and its task wants 1 for OpenMP alone"
	# the task that failed first, then those that stopped on its failure
	assert_line --regexp "^FAIL +coll.allreduce +task 3 \(node2\): gloo: rank 3 could not connect its full mesh on [a-z0-9]+: Resource temporarily unavailable; task 0 \(node1\): gloo: rank 0 could not connect its full mesh on [a-z0-9]+: a peer failed first \(gloo: rank 3 could not connect its full mesh on [a-z0-9]+: Resource temporarily unavailable\); "
	assert_line --regexp "^SKIP +net.pairs +no task reached them \\(coll.allreduce\\)$"
	assert_line --regexp "^ddp-check: [0-9]+ checks OK, 0 WARN, 2 FAILED, 6 skipped$"
	refute_output --partial "the rendezvous failed midway"
}

@test "net.shm under NCCL: a container's small /dev/shm is a warning, a read-only one a failure, each naming the node" {
	# node2's task in a mount namespace of its own with a container's
	# /dev/shm: docker's default 64 MiB, an NCCL segment and 30 MiB of
	# other files already in it
	local shm="mount -t tmpfs -o size=64m tmpfs /dev/shm && fallocate -l 9637888 /dev/shm/nccl-Ab12Cd && fallocate -l 30m /dev/shm/other"
	run crun srun -N2 --gres=gpu:1 --ddp=nccl bash -c \
		"[ \$SLURM_NODEID = 1 ] || exec $CHECK ${ARGS[*]}; exec unshare -m sh -c '$shm && exec $CHECK ${ARGS[*]}'"
	echo "$output"
	assert_failure 1 # coll.backend: no GPU, no NCCL here
	assert_line --regexp "^WARN +net.shm +node2: 2[0-9] MiB free of 64 MiB in /dev/shm \(task 1\), 1 NCCL segment there \(9 MiB: running jobs', or a crashed one's\): NCCL's ranks on a node fail to start when their segments do not fit \(failed to extend /dev/shm/nccl-...\); NCCL asks containers for 1 GiB \(--shm-size=1g\)$"
	# the task's own 4 MiB segment was removed again
	refute_output --partial "ddp-check-"
	# read-only: no segment can be made
	run crun srun -N2 --gres=gpu:1 --ddp=nccl bash -c \
		"[ \$SLURM_NODEID = 1 ] || exec $CHECK ${ARGS[*]}; exec unshare -m sh -c 'mount -t tmpfs -o size=64m,ro tmpfs /dev/shm && exec $CHECK ${ARGS[*]}'"
	echo "$output"
	assert_failure 1
	assert_line --regexp "^FAIL +net.shm +node2: cannot create a file in /dev/shm: Read-only file system \(task 1\): NCCL makes its shared-memory segments there at start-up and fails without them .*docker --shm-size=1g; Kubernetes: an emptyDir of medium Memory\)$"
	# a full one: the file is made, its 4 MiB are not there
	run crun srun -N1 --gres=gpu:1 --ddp=nccl unshare -m sh -c \
		"mount -t tmpfs -o size=6m tmpfs /dev/shm && fallocate -l 4m /dev/shm/other && exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_line --regexp "^FAIL +net.shm +node1: cannot reserve 4 MiB \(NCCL's smallest segment\) in /dev/shm: No space left on device \(task 0\)"
	# this machine's own /dev/shm; no system bus here, so logind's
	# RemoveIPC is not known (and said so)
	run crun srun -N2 --gres=gpu:1 --ddp=nccl "$CHECK" "${ARGS[@]}"
	assert_line --regexp "^OK +net.shm +a 4 MiB segment made in shared memory on every task, (at least [0-9.]+ [GM]iB free|no size limit); "
	# gloo keeps nothing there
	run crun srun -N2 --ddp=gloo unshare -m sh -c "mount -t tmpfs -o size=64m,ro tmpfs /dev/shm && exec $CHECK ${ARGS[*]}"
	assert_success
	assert_line --regexp "^OK +net.shm +gloo keeps nothing in shared memory \(/dev/shm\)$"
}

@test "net.shm under NCCL: logind's RemoveIPC, asked over the system bus, is a warning for a user's tasks and not for root's" {
	start_logind yes
	# the tasks drop to nobody (uid 65534), as a user's would run
	run crun env DBUS_SYSTEM_BUS_ADDRESS="$BUS" srun -N2 --gres=gpu:1 --ddp=nccl \
		setpriv --reuid=65534 --regid=65534 --clear-groups "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_failure 1 # coll.backend: no GPU, no NCCL here
	assert_line "WARN  net.shm                logind's RemoveIPC=yes on node1, node2 removes the shared memory of a user (uid 65534 here) when their last login session on the node ends: an ssh to a job's node and out again deletes NCCL's segments under the running job (unlink shared memory failed); RemoveIPC=no in /etc/systemd/logind.conf"
	# root's tasks: a system user's IPC stays
	run crun env DBUS_SYSTEM_BUS_ADDRESS="$BUS" srun -N2 --gres=gpu:1 --ddp=nccl "$CHECK" "${ARGS[@]}"
	assert_line --regexp "^OK +net.shm +.*; RemoveIPC=yes spares the tasks' user \(uid 0, a system user\)$"
	stop_logind
	start_logind no
	run crun env DBUS_SYSTEM_BUS_ADDRESS="$BUS" srun -N2 --gres=gpu:1 --ddp=nccl \
		setpriv --reuid=65534 --regid=65534 --clear-groups "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_line --regexp "^OK +net.shm +.*; logind keeps users' shared memory \(RemoveIPC=no\)$"
	# a bus with no logind on it: not known, said so, within the bound
	stop_logind
	LOGIND_DIR=$(mktemp -d /tmp/ddp-logind.XXXXXX)
	run crun env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$LOGIND_DIR/none" srun -N1 --gres=gpu:1 --ddp=nccl "$CHECK" "${ARGS[@]}"
	assert_line --regexp "^OK +net.shm +.*; logind's RemoveIPC not known \(node1: no system bus \(No such file or directory\)\)$"
}

@test "env.nccl under NCCL: a variable that differs between tasks and a transport switched off are warnings naming the tasks" {
	run crun srun -N2 --gres=gpu:1 --ddp=nccl bash -c \
		"[ \$SLURM_NODEID = 1 ] && export NCCL_PROTO=LL NCCL_SHM_DISABLE=1; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_failure 1 # coll.backend: no GPU, no NCCL here
	assert_line "WARN  env.nccl               NCCL_PROTO differs between tasks: unset on task 0 (node1), 'LL' on task 1 (node2); NCCL_SHM_DISABLE=1 on task 1 (node2) switches shared memory between a node's ranks off: every collective takes a slower path (a debugging setting left in a profile or batch script?)"
	# the same on every task, and the per-node ones left out
	run crun env NCCL_BUFFSIZE=8388608 srun -N2 --gres=gpu:1 --ddp=nccl bash -c \
		"export NCCL_DEBUG=\$SLURM_NODEID; exec $CHECK ${ARGS[*]}"
	assert_line --regexp "^OK +env.nccl +the same on every task: NCCL_BUFFSIZE=8388608$"
}

@test "bind.threads: an OMP_NUM_THREADS above a task's CPUs is a warning naming the task and its CPUs" {
	run crun srun -N1 -n2 --ddp=gloo bash -c \
		"[ \$SLURM_PROCID = 1 ] && export OMP_NUM_THREADS=4; exec $CHECK ${ARGS[*]}"
	echo "$output"
	assert_success
	assert_line --regexp "^WARN +bind.threads +task 1 \(node1\): OMP_NUM_THREADS=4 on 1 CPU \([0-9]+\): its threads take turns on them \(an OMP_NUM_THREADS from a profile or batch script\? unset, srun --ddp sets it to each task's cores\)$"
}

@test "usage errors and running outside a step exit 2" {
	run env -u SLURM_PROCID -u RANK -u SLURM_JOB_ID "$CHECK"
	assert_failure 2
	assert_output --partial "not a task of a distributed step"
	run "$CHECK" --maxbytes 12Q
	assert_failure 2
	assert_output --partial "--maxbytes '12Q': expected a size"
	run "$CHECK" --timeout 0
	assert_failure 2
	run "$CHECK" --bogus
	assert_failure 2
	run "$CHECK" --help
	assert_success
	assert_output --partial "busbw"
}

@test "on a GPU: --ddp=nccl at world size 1 reports busbw (skips without a GPU)" {
	if ! ls /dev/nvidia0 >/dev/null 2>&1; then
		skip "no GPU on this machine (/dev/nvidia0 absent): ddp-check's NCCL path did not run on real NCCL (ddp_check_emu.bats runs it on cuemu's)"
	fi
	local port
	port=$(free_port)
	run env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1 \
		MASTER_PORT="$port" NCCL_SOCKET_IFNAME=lo DDP_BACKEND=nccl "$CHECK" -e 64M --timeout 60
	echo "$output"
	assert_success
	assert_line --regexp "^OK +coll.backend +NCCL [0-9]+\.[0-9]+\.[0-9]+ and a GPU on every task$"
	assert_line --regexp "^OK +coll.allreduce +nccl all-reduce of crafted inputs exact on all 1 tasks"
	assert_output --regexp "
 +67108864 +16777216 +float +sum +[0-9.]+ +[0-9.]+ +0.00
"
}
