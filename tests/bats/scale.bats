#!/usr/bin/env bats
# Scale on a real Slurm: 16 nodes (each a namespace with its own slurmd),
# srun -N16 --ntasks-per-node=4 --ddp=gloo: the full contract on 64 ranks,
# then a 64-rank gloo all-reduce through the trainer's comm layer.
# bats file_tags=slurm,scale

load helpers
# Bats arms a test's timer before its body runs: the bound is set here, for
# every test of the file. 16 nodes of slurmd on the 2 cores start and run slowly.
BATS_TEST_TIMEOUT=240

TOOL="$REPO/build/tests/tools/allreduce_check"

setup_file() {
	make -s -C "$REPO/tests" tools >&3 2>&1
	cluster_start 16
}

teardown_file() {
	cluster_stop
}

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "srun -N16 --ntasks-per-node=4 --ddp=gloo: 64 ranks, complete and unique, one head, one port" {
	run --separate-stderr crun srun -N16 --ntasks-per-node=4 -c1 --ddp=gloo "$REPORT"
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	tasks
	[ "${#T[@]}" -eq 64 ]
	assert_equal "$(field 3 | sort -n | tr '\n' ' ')" "$(seq 0 63 | tr '\n' ' ')"
	assert_equal "$(field 5 | sort -u)" "64"
	assert_equal "$(field 6 | sort -u)" "4"
	assert_equal "$(field 8 | sort -u)" "$(node_ip 1)"
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
	assert_equal "$(field 13 | sort -u)" "gloo"
	local i
	for i in $(seq 1 16); do
		# local ranks 0-3, NODE_RANK i-1, global ranks in Slurm's block layout,
		# the node's own interface
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $4}' | sort | tr '\n' ' ')" "0 1 2 3 "
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $7}' | sort -u)" "$((i - 1))"
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $3}' | sort -n | tr '\n' ' ')" \
			"$(seq $((4 * i - 4)) $((4 * i - 1)) | tr '\n' ' ')"
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $12}' | sort -u)" "$(node_ip "$i")"
	done
}

@test "a 64-rank gloo all-reduce through the comm layer gives the exact sum on every rank" {
	[ -x "$TOOL" ]
	run --separate-stderr crun srun -N16 --ntasks-per-node=4 -c1 --ddp=gloo "$TOOL" 65536
	if [ "$status" -ne 0 ]; then echo "$stderr"; fi
	assert_success
	# every rank, once, with the right sum 64*65/2
	assert_equal "$(printf '%s\n' "$output" | grep -c '^allreduce rank [0-9]* of 64 on node[0-9]*: 65536 floats correct (sum 2080)')" "64"
	assert_equal "$(printf '%s\n' "$output" | sed -n 's/^allreduce rank \([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' ')" \
		"$(seq 0 63 | tr '\n' ' ')"
	printf '%s\n' "$output" | grep '^allreduce rank 0 ' >&3
}
