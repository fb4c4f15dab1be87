#!/usr/bin/env bats
# The plugin inside a slurmd and slurmstepd run under valgrind (node1, the
# head of every step here): the contract, a failing step, the token and the
# port check work, and valgrind finds no error and no leak in the plugin or
# libddpenv.  Slow (valgrind), so it runs a few steps only.
# bats file_tags=slurm,valgrind

load helpers

setup_file() {
	export BATS_TEST_TIMEOUT=300
	DDP_CLUSTER_VALGRIND=1 cluster_start 2
}

teardown_file() {
	cluster_stop
}

setup() {
	as_user # the jobs are the unprivileged user's
	DIR=${DDP_CLUSTER_DIR:-$REPO/build/cluster}
}

teardown() {
	dump_logs_on_failure
}

@test "valgrind: the contract on a head whose slurmstepd runs under valgrind" {
	secret="$DIR/etc/ddp.secret"
	head -c 32 /dev/urandom >"$secret"
	chmod 600 "$secret"
	printf 'rdzv_secret: %s\nenv: {gloo: {GLOO_SITE_VAR: "1"}}\n' "$secret" >"$DIR/etc/ddp.yaml"
	run --separate-stderr timeout 240 "$CLUSTER" run srun -N2 -n4 --ddp=gloo \
		bash -c 'echo "$RANK $WORLD_SIZE $MASTER_ADDR $GLOO_SITE_VAR ${#DDP_RDZV_TOKEN}"'
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort | tr '\n' ';')" \
		"0 4 $(node_ip 1) 1 64;1 4 $(node_ip 1) 1 64;2 4 $(node_ip 1) 1 64;3 4 $(node_ip 1) 1 64;"
}

@test "valgrind: a step that fails in slurmstepd fails cleanly" {
	run --separate-stderr timeout 240 "$CLUSTER" run env MASTER_ADDR=nosuch.invalid srun -N2 -n2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: MASTER_ADDR=nosuch.invalid (set in the job's environment): cannot resolve"* ]]
	printf 'network: {include: [ib*]}\n' >"$DIR/etc/ddp.yaml"
	run --separate-stderr timeout 240 "$CLUSTER" run srun -N1 -w node1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"network.include [ib*]"* ]]
	cp "$REPO/conf/ddp.yaml" "$DIR/etc/ddp.yaml"
	run crun sinfo -h -N -o '%N %T'
	refute_output --regexp 'drain|down|fail'
}

@test "valgrind: no error or leak in the plugin or libddpenv" {
	cluster_stop # slurmd and slurmstepd exit: valgrind writes its leak reports
	logs=("$DIR"/log/valgrind.node1.*)
	[ -e "${logs[0]}" ]
	stepd=$(grep -l 'Command: /usr/sbin/slurmstepd' "${logs[@]}" | wc -l)
	echo "# $stepd slurmstepd processes ran under valgrind" >&3
	[ "$stepd" -ge 3 ]
	# Each error or leak record is a block; ours name the plugin's or the
	# library's functions in their stack.  (Slurm's own records, and its
	# "possibly lost" option lists in slurmd, are not ours.)
	run awk -v ours='spank_ddp|ddpenv_|ddp_stepd|ddp_local|ddp_option|ddp_config' \
		-v bad='Invalid|uninitialised|Conditional jump|Syscall param|Mismatched|definitely lost|overlap' '
		function flush() { if (blk ~ ours && blk ~ bad) print blk; blk = "" }
		/^==[0-9]+== [A-Z0-9]/ { flush() }
		{ blk = blk "\n" $0 }
		END { flush() }' "${logs[@]}"
	assert_output ""
}
