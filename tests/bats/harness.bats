#!/usr/bin/env bats
# The test cluster itself: it must not trip over a network someone else holds.
# bats file_tags=slurm

load helpers

BLOCKED='' FOREIGN='' OWN_NS='' OTHERS=()

teardown() {
	dump_logs_on_failure
	cluster_stop
	local d
	for d in ${OTHERS[@]+"${OTHERS[@]}"}; do DDP_CLUSTER_DIR=$d "$CLUSTER" stop >/dev/null 2>&1 || true; done
	[ -z "$BLOCKED" ] || ip route del unreachable "$BLOCKED" 2>/dev/null || true
	[ -z "$FOREIGN" ] || ip netns del "$FOREIGN" 2>/dev/null || true
	[ -z "$OWN_NS" ] || DDP_CLUSTER_NS=$OWN_NS "$CLUSTER" stop >/dev/null 2>&1 || true
}

@test "a route over the cluster's /24 that is not ours (a second cluster, a killed run): the next free /24, and stop leaves that route" {
	cluster_start 1
	local first
	first=$(cluster_net NET)
	[[ "$first" =~ ^10\.231\.[0-9]+$ ]]
	cluster_stop
	# what a killed run or a cluster in another checkout leaves in this namespace
	BLOCKED="$first.0/24"
	ip route add unreachable "$BLOCKED"
	run "$CLUSTER" start 1
	assert_success
	# every network skipped is named: the harness's own and any this
	# namespace held before it (CI's holds 10.231.0.0/24), or another
	# cluster holds beside it (bench.bats's, in make check's other worker)
	assert_output --regexp "cluster: (10\.231\.[0-9]+\.0/24, )*${first//./\\.}\.0/24(, 10\.231\.[0-9]+\.0/24)* (is|are) in use in this network namespace"
	local second
	second=$(cluster_net NET)
	[ "$second" != "$first" ]
	run --separate-stderr crun srun -N1 --ddp=gloo sh -c 'echo "$MASTER_ADDR"'
	assert_success
	assert_output "$second.11"
	run "$CLUSTER" env
	assert_line "DDP_CLUSTER_NET=$second"
	cluster_stop
	run ip route show table all root "$BLOCKED"
	assert_output --partial "unreachable $BLOCKED"
	run ip route show table all root "$second.0/24"
	assert_output ""
}

@test "an srun on an idle cluster is scheduled at submit: no SchedulerParameters word holds \"defer\"" {
	# slurmctld takes any word containing "defer" for defer: every job
	# then waits for the next backfill pass (~0.8 s each srun, minutes
	# over make check)
	cluster_start 2
	run --separate-stderr crun srun -N2 true
	assert_success
	[[ "$stderr" != *"queued and waiting for resources"* ]] || { echo "$stderr"; false; }
	run crun scontrol show config
	assert_line --regexp '^SchedulerParameters +='
	refute_line --regexp '^SchedulerParameters +=.*defer'
}

@test "DDP_CLUSTER_NET names a network that is in use: start refuses, naming it, and leaves nothing behind" {
	BLOCKED="10.231.60.0/24"
	ip route add unreachable "$BLOCKED"
	# a prefix of its own: make check's other worker runs clusters in
	# ddpt-* and ddpt2-* meanwhile (CI saw one of theirs here)
	OWN_NS=ddpu
	[ ! -e /run/netns/$OWN_NS-ctl ] || skip "a cluster already runs in $OWN_NS-*"
	run env DDP_CLUSTER_NS=$OWN_NS DDP_CLUSTER_NET=10.231.60 "$CLUSTER" start 1
	assert_failure
	assert_output --partial "cannot add 'unreachable 10.231.60.0/24' route"
	run ip netns list
	refute_output --partial "$OWN_NS-"
}

@test "another checkout's cluster holds the namespaces ddpt-*: the next prefix, and stop leaves the other's alone" {
	[ ! -e /run/netns/ddpt-ctl ] || skip "a cluster already runs in ddpt-*"
	ip netns add ddpt-ctl || skip "another cluster claimed ddpt-ctl meanwhile"
	FOREIGN=ddpt-ctl
	run "$CLUSTER" start 1
	assert_success
	# the next free prefix: ddpt2, or later where make check's other
	# worker runs a cluster in it
	assert_output --regexp "namespace ddpt-ctl belongs to another cluster \(not this run folder's\): using ddpt[2-9]-\*"
	local ns
	ns=$(cluster_net NS)
	[[ "$ns" =~ ^ddpt[2-9]$ ]]
	assert_output --partial "using $ns-*"
	run --separate-stderr crun srun -N1 --ddp=gloo printenv RANK
	assert_success
	assert_output 0
	# a second start of this run folder's cluster is refused: it runs
	run "$CLUSTER" start 1
	assert_failure
	assert_output --partial "namespace $ns-ctl exists: a cluster is running"
	cluster_stop
	[ -e /run/netns/ddpt-ctl ]
	[ ! -e "/run/netns/$ns-ctl" ]
	[ ! -e "$CLUSTER_DIR/net" ]
	# stop again, with no cluster of this run folder's: nothing of ours is
	# recorded, so the other's namespaces stay (they used to go: the
	# default prefix ddpt taken as ours)
	run "$CLUSTER" stop
	assert_success
	[ -e /run/netns/ddpt-ctl ]
	# run, node and status with no cluster of this folder's refuse, naming
	# the folder, instead of reaching the other's controller with this
	# folder's stale slurm.conf
	run "$CLUSTER" run sinfo
	assert_failure
	assert_output "cluster: no cluster started in run folder $CLUSTER_DIR (start one with: $CLUSTER start)"
	run "$CLUSTER" node 1 true
	assert_failure
	assert_output --partial "no cluster started in run folder $CLUSTER_DIR"
	run "$CLUSTER" status
	assert_success
	assert_output "no cluster started in run folder $CLUSTER_DIR"
	[ -e /run/netns/ddpt-ctl ]
}

@test "three clusters started at once (as make check's worker starts one beside the Bats files'): each claims its own namespaces and network, and each runs a step" {
	local d i pids=() nss=() nets=()
	for i in 1 2 3; do
		d=$BATS_TEST_TMPDIR/c$i
		OTHERS+=("$d")
		DDP_CLUSTER_DIR=$d "$CLUSTER" start 1 >"$BATS_TEST_TMPDIR/start.$i" 2>&1 &
		pids+=($!)
	done
	for i in 0 1 2; do
		wait "${pids[$i]}" || fail "cluster $((i + 1)) did not start: $(cat "$BATS_TEST_TMPDIR/start.$((i + 1))")"
	done
	for d in "${OTHERS[@]}"; do
		nss+=("$(sed -n 's/^NS=//p' "$d/net")")
		nets+=("$(sed -n 's/^NET=//p' "$d/net")")
		run --separate-stderr env DDP_CLUSTER_DIR="$d" timeout 90 "$CLUSTER" run srun -N1 --ddp=gloo printenv MASTER_ADDR
		assert_success
		assert_output "${nets[-1]}.11"
	done
	assert_equal "$(printf '%s\n' "${nss[@]}" | sort -u | wc -l)" 3
	assert_equal "$(printf '%s\n' "${nets[@]}" | sort -u | wc -l)" 3
	for d in "${OTHERS[@]}"; do DDP_CLUSTER_DIR=$d "$CLUSTER" stop >/dev/null 2>&1; done
	# each stop took its own routes and namespaces only
	for i in 0 1 2; do
		[ ! -e "/run/netns/${nss[$i]}-ctl" ]
		[ -z "$(ip -4 route show table all root "${nets[$i]}.0/24")" ]
	done
}

@test "cluster.sh node: a node number it lacks, or no command, is refused naming what it expected" {
	cluster_start 1
	run "$CLUSTER" node 2 true
	assert_failure
	assert_output --regexp "^cluster: node 2: no namespace ddpt[0-9]*-n2 \(nodes: 1\)$"
	run "$CLUSTER" node x true
	assert_failure
	assert_output "cluster: node: expected a node number and a command, got 'x true'"
	run "$CLUSTER" node 1
	assert_failure
	assert_output --partial "node: expected a node number and a command"
	run "$CLUSTER" node 1 ip -o link show enp1s0
	assert_success
	assert_output --partial "enp1s0"
}
