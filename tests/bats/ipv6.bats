#!/usr/bin/env bats
# An IPv6 network: every node's name resolves to its IPv6 address only
# (tests/cluster/cluster.sh with DDP_CLUSTER_IPV6; Slurm itself keeps its
# IPv4 NodeAddr).  The contract, ddp-check, PyTorch and cnn_train work
# over it, where `srun hostname --ip-address` scripts stitch "addr:port".
# bats file_tags=slurm

load helpers
BATS_TEST_TIMEOUT=180

cluster_file 3 DDP_CLUSTER_IPV6=1

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "MASTER_ADDR is the head's IPv6 address, without brackets; each node's interface carries the head's network" {
	run --separate-stderr crun srun -N3 -n3 --ddp=gloo "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 3 ]
	assert_equal "$(field 8 | sort -u)" "$(node_ip6 1)"
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
	# node I talks on enpIs0, the interface holding an address in the head's /64
	assert_equal "$(printf '%s\n' "${T[@]}" | awk '{print $2, $10, $11}' | sort | tr '\n' ' ')" \
		"node1 enp1s0 enp1s0 node2 enp2s0 enp2s0 node3 enp3s0 enp3s0 "
	run --separate-stderr crun srun -N1 -n1 --ddp=gloo "$REPO/build/bin/ddp-env" --explain
	assert_success
	assert_line --regexp "^MASTER_ADDR +$(node_ip6 1) +head node1 .*resolved by name: node1"
}

@test "ddp-check over IPv6: every check OK, the rendezvous written [address]:port" {
	run --separate-stderr crun srun -N3 -n3 --ddp=gloo "$REPO/build/bin/ddp-check" -e 64K --timeout 30
	assert_success
	assert_line --regexp "^OK +rdzv.join +all 3 tasks joined the rendezvous at \[$(node_ip6 1)\]:[0-9]+$"
	assert_line --regexp "^OK +env.head +MASTER_ADDR=$(node_ip6 1) is an address of node1, which runs RANK 0"
	assert_line --regexp "^OK +net.probe +every node reached every other"
	assert_line --regexp "^OK +coll.allreduce +gloo all-reduce of crafted inputs exact on all 3 tasks"
	assert_line --regexp "^ddp-check: [0-9]+ checks OK, 0 WARN, 0 FAILED$"
}

@test "PyTorch DDP (gloo) and cnn_train train across 3 nodes over the IPv6 rendezvous" {
	run --separate-stderr crun srun -N3 -n3 --ddp=gloo /usr/bin/python3 "$REPO/contrib/pytorch/train_ddp.py" \
		--max-steps 4 --batch-size 32 --train-limit 960 --test-limit 300
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	assert_line --partial "# world 3, backend gloo, device cpu, master [$(node_ip6 1)]:"
	params=$(printf '%s\n' "$output" | grep '^params rank ')
	[ "$(echo "$params" | wc -l)" -eq 3 ]
	assert_equal "$(echo "$params" | awk '{print $4}' | sort -u | wc -l)" "1"
	run --separate-stderr crun srun -N3 -n3 --ddp=gloo "$REPO/build/bin/cnn_train" --data synthetic --max-steps 3
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	assert_line --regexp '^done: 3 steps, [0-9]+ images/s \(3 ranks\)'
}
