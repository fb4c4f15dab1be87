#!/usr/bin/env bats
# make demo's script (after the packages and the build, which make check has
# done): a 2-node cluster, what each task gets, ddp-check, training through
# srun --ddp=gloo, the cluster stopped.  Shortened with DEMO_ARGS; the rest
# is what a user's `make demo` runs.
# bats file_tags=slurm

load helpers

teardown() {
	cluster_stop
}

@test "make demo's script: the contract each task gets, ddp-check passes, two ranks train and agree, the cluster stopped" {
	run --separate-stderr env DEMO_ARGS="--train-limit 2048 --test-limit 512" "$REPO/scripts/demo.sh"
	echo "$output"
	echo "$stderr" >&2
	assert_success
	local net
	net=$(sed -n 's|^cluster: up: 2 nodes on \(10\.231\.[0-9]*\)\.0/24, .*|\1|p' <<<"$stderr")
	[ -n "$net" ]
	# each task's variables with the reason (ddp-env --explain): the head
	# is the first node by its Slurm address, one port for both, ranks 0
	# and 1 of 2, gloo on the interface holding the task's own address on
	# the head's subnet (not lo, whatever a name resolves to)
	[ "$(grep -cE "^  MASTER_ADDR +${net//./\\.}\.11 +head node1 " <<<"$output")" -eq 2 ]
	[ "$(grep -oE '^  MASTER_PORT +[0-9]+ ' <<<"$output" | sort -u | wc -l)" -eq 1 ]
	assert_line --regexp '^  RANK +0 +SLURM_PROCID$'
	assert_line --regexp '^  RANK +1 +SLURM_PROCID$'
	[ "$(grep -cE '^  WORLD_SIZE +2 ' <<<"$output")" -eq 2 ]
	assert_line --regexp "^  GLOO_SOCKET_IFNAME +[a-z0-9]+ +holds ${net//./\\.}\.11/24, "
	assert_line --regexp "^  GLOO_SOCKET_IFNAME +[a-z0-9]+ +holds ${net//./\\.}\.12/24, "
	assert_line --regexp '^  ddp-check: [0-9]+ checks OK, 0 WARN, 0 FAILED$'
	assert_line --regexp '^# cnn_train: world 2 \(gloo\), .*data fashion-mnist \(2048 train, 512 test\)'
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^done: 16 steps, [0-9]+ images/s \(2 ranks\), test accuracy [0-9.]+%$'
	assert_line "demo:   srun -N2 --ddp=gloo python3 contrib/pytorch/train_ddp.py --epochs 1"
	# the script's trap stopped the cluster: nothing of it answers
	run "$CLUSTER" run sinfo
	assert_failure
}
