#!/usr/bin/env bats
# The --ddp env contract on a real 3-node Slurm.
# bats file_tags=slurm

load helpers

cluster_file 3

# the jobs are the unprivileged user's
setup() {
	as_user
}

teardown() {
	dump_logs_on_failure
}

@test "srun -N3 --ntasks-per-node=2 --ddp: every task gets the contract" {
	run --separate-stderr crun srun -N3 --ntasks-per-node=2 --ddp "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 6 ]
	# ranks unique and complete
	assert_equal "$(field 3 | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 "
	# WORLD_SIZE=6, LOCAL_WORLD_SIZE=2 everywhere
	assert_equal "$(field 5 | sort -u)" "6"
	assert_equal "$(field 6 | sort -u)" "2"
	# MASTER_ADDR is node1's test address on every task (node1's own
	# /etc/hosts says 127.0.1.1: the trap is avoided there too)
	assert_equal "$(field 8 | sort -u)" "$(node_ip 1)"
	# one port, in the default range
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
	port=$(field 9 | head -n1)
	[ "$port" -ge 20480 ]
	[ "$port" -le 32767 ]
	# per node: local ranks 0,1; NODE_RANK = node index - 1; the interface
	# is the node's own and holds the node's own address; never docker0
	for i in 1 2 3; do
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $4}' | sort | tr '\n' ' ')" "0 1 "
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $7}' | sort -u)" "$((i - 1))"
		assert_equal "$(printf '%s\n' "${T[@]}" | awk -v h=node$i '$2==h {print $10"/"$11"/"$12}' | sort -u)" \
			"enp${i}s0/enp${i}s0/$(node_ip $i)"
	done
	assert_equal "$(field 13 | sort -u)" "gloo"
	assert_equal "$(field 14 | sort -u)" "1"
	# torchrun's NCCL error handling: a hung collective ends the process
	assert_equal "$(field 16 | sort -u)" "1"
}

@test "ranks follow Slurm's task layout (block distribution)" {
	run --separate-stderr crun srun -N3 --ntasks-per-node=2 --ddp=gloo "$REPORT"
	assert_success
	tasks
	# global ranks 0-1 on node1, 2-3 on node2, 4-5 on node3
	assert_equal "$(printf '%s\n' "${T[@]}" | awk '{print $3":"$2}' | sort -n | tr '\n' ' ')" \
		"0:node1 1:node1 2:node2 3:node2 4:node3 5:node3 "
}

@test "ddp-env --explain inside a --ddp task prints the values the task has" {
	run --separate-stderr crun srun -N2 -n2 --ddp=gloo bash -c \
		'"$0" --explain | awk -v r=$RANK -v a=$MASTER_ADDR -v p=$MASTER_PORT "
			\$1==\"RANK\" && \$2==r {ok++} \$1==\"MASTER_ADDR\" && \$2==a {ok++}
			\$1==\"MASTER_PORT\" && \$2==p {ok++} END {print \"match\", ok}"' "$REPO/build/bin/ddp-env"
	assert_success
	assert_equal "$(printf '%s\n' "$output" | grep -c '^match 3$')" "2"
}

@test "ddp-env in a task without the plugin option gives the same contract" {
	run --separate-stderr crun srun -N3 --ntasks-per-node=2 bash -c \
		'eval "$("$0")" && exec "$1"' "$REPO/build/bin/ddp-env" "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 6 ]
	assert_equal "$(field 3 | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 "
	assert_equal "$(field 8 | sort -u)" "$(node_ip 1)"
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
}

@test "--ddp absent: the plugin changes nothing" {
	run --separate-stderr crun srun -N2 -n2 env
	assert_success
	refute_output --regexp '^(RANK|LOCAL_RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|NCCL_SOCKET_IFNAME|GLOO_SOCKET_IFNAME|DDP_BACKEND|DDP_STEP|TORCHELASTIC_RUN_ID|GROUP_RANK|TORCH_NCCL_ASYNC_ERROR_HANDLING|USE_LIBUV)='
}

@test "DDP_HEAD_FROM=nodeaddr: the head's address is Slurm's NodeAddr, on every node" {
	run --separate-stderr crun env DDP_HEAD_FROM=nodeaddr srun -N3 --ntasks-per-node=1 --ddp=gloo "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 3 ]
	assert_equal "$(field 8 | sort -u)" "$(node_ip 1)"
}

@test "DDP_HEAD_FROM=name: node1's own 127.0.1.1 fails the step, saying so" {
	# node1's /etc/hosts maps node1 to 127.0.1.1 (Debian's line); with
	# name only there is no NodeAddr fallback, so the task on node1 fails
	run --separate-stderr crun env DDP_HEAD_FROM=name srun -N3 --ntasks-per-node=1 --ddp=gloo "$REPORT"
	assert_failure
	[[ "$stderr" == *"head node node1 resolves only to loopback/link-local 127.0.1.1"* ]]
	[[ "$stderr" == *"head_from=name: Slurm's NodeAddr was not consulted"* ]]
	# no task ran with a half-set environment
	refute_output --partial "task node1"
}

@test "DDP_HEAD_FROM=dns is refused, naming the variable and the choices" {
	run --separate-stderr crun env DDP_HEAD_FROM=dns srun -N2 -n2 --ddp=gloo "$REPORT"
	assert_failure
	[[ "$stderr" == *"DDP_HEAD_FROM (set in the job's environment): 'dns': expected auto, name or nodeaddr"* ]]
	refute_output --partial "task "
}

@test "USE_LIBUV=0 for PyTorch's env:// (2.4 and later fail without it where built without libuv)" {
	run --separate-stderr crun srun -N2 -n2 --ddp=gloo "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 2 ]
	assert_equal "$(field 17 | sort -u)" "0"
}

@test "a MASTER_PORT, NCCL_SOCKET_IFNAME, NCCL error handling and USE_LIBUV set by the user win" {
	run --separate-stderr crun env MASTER_PORT=23456 NCCL_SOCKET_IFNAME=lo TORCH_NCCL_ASYNC_ERROR_HANDLING=3 \
		USE_LIBUV=1 srun -N2 -n2 --ddp=gloo "$REPORT"
	assert_success
	tasks
	assert_equal "$(field 9 | sort -u)" "23456"
	assert_equal "$(field 10 | sort -u)" "lo"
	assert_equal "$(field 16 | sort -u)" "3"
	assert_equal "$(field 17 | sort -u)" "1"
	# the one the user did not set is still chosen per node: each node's own
	local t
	for t in "${T[@]}"; do
		read -r _ host _ _ _ _ _ _ _ _ gloo_if _ <<<"$t"
		assert_equal "$gloo_if" "enp${host#node}s0"
	done
}

@test "sbatch --ddp reaches every srun; srun --ddp inside overrides; the batch shell gets nothing" {
	out="$BATS_FILE_TMPDIR/sbatch.out"
	cat >"$BATS_FILE_TMPDIR/job.sh" <<-SCRIPT
	#!/bin/bash
	#SBATCH --ddp=gloo
	echo "batch RANK=\${RANK:-unset} MASTER_ADDR=\${MASTER_ADDR:-unset} DDP_STEP=\${DDP_STEP:-unset}"
	srun -n2 $REPORT
	srun -n2 --ddp=nccl $REPORT
	SCRIPT
	run --separate-stderr sbatch_wait -N2 --gres=gpu:1 -o "$out" "$BATS_FILE_TMPDIR/job.sh"
	assert_success
	run cat "$out"
	assert_line "batch RANK=unset MASTER_ADDR=unset DDP_STEP=unset"
	tasks
	[ "${#T[@]}" -eq 4 ]
	assert_equal "$(printf '%s\n' "${T[@]:0:2}" | awk '{print $13}' | sort -u)" "gloo"
	assert_equal "$(printf '%s\n' "${T[@]:2:2}" | awk '{print $13}' | sort -u)" "nccl"
	# run ids name the job's steps 0 and 1
	assert_equal "$(field 15 | sed 's/.*\.//' | sort -u | tr '\n' ' ')" "0 1 "
}

@test "a bare #SBATCH --ddp (or salloc --ddp) reaches every srun as auto" {
	# Slurm 22.05 hands the sruns a bare option as the string "(null)"
	out="$BATS_FILE_TMPDIR/bare.out"
	cat >"$BATS_FILE_TMPDIR/bare.sh" <<-SCRIPT
	#!/bin/bash
	#SBATCH --ddp
	echo "batch option=\$SLURM_SPANK__SLURM_SPANK_OPTION_ddp_ddp"
	srun -n2 bash -c 'echo "gpu \$SLURM_PROCID \$DDP_BACKEND \$DDP_BACKEND_FROM"'
	srun -n2 --gres=none bash -c 'echo "task \$SLURM_PROCID \$DDP_BACKEND \$DDP_BACKEND_FROM"'
	SCRIPT
	run --separate-stderr sbatch_wait -N2 --gres=gpu:1 -o "$out" "$BATS_FILE_TMPDIR/bare.sh"
	assert_success
	run cat "$out"
	assert_line "batch option=(null)"
	assert_line "task 0 gloo --ddp=auto: the step has no GPUs"
	assert_line "task 1 gloo --ddp=auto: the step has no GPUs"
	assert_line "gpu 0 nccl --ddp=auto: the step has GPUs"
	assert_line "gpu 1 nccl --ddp=auto: the step has GPUs"
	refute_output --partial "unknown backend"
	run --separate-stderr crun salloc -N1 --ddp srun -n1 bash -c 'echo "salloc $DDP_BACKEND"'
	assert_success
	assert_output "salloc gloo"
}

@test "a sub-step on other nodes gets its own head" {
	out="$BATS_FILE_TMPDIR/substep.out"
	cat >"$BATS_FILE_TMPDIR/sub.sh" <<-SCRIPT
	#!/bin/bash
	srun -N1 -n1 -r1 --ddp=gloo $REPORT
	srun -N2 -n2 -r1 --ddp=gloo $REPORT
	SCRIPT
	run --separate-stderr sbatch_wait -N3 -o "$out" "$BATS_FILE_TMPDIR/sub.sh"
	assert_success
	run cat "$out"
	tasks
	[ "${#T[@]}" -eq 3 ]
	# step 0: one task on node2, its own head, rank 0 of 1
	assert_equal "$(printf '%s\n' "${T[0]}" | awk '{print $2, $3, $5, $8}')" "node2 0 1 $(node_ip 2)"
	# step 1: node2 and node3, head node2
	assert_equal "$(printf '%s\n' "${T[@]:1:2}" | awk '{print $8}' | sort -u)" "$(node_ip 2)"
	assert_equal "$(printf '%s\n' "${T[@]:1:2}" | awk '{print $3}' | sort | tr '\n' ' ')" "0 1 "
}

@test "two steps running at once in one allocation get different ports" {
	out="$BATS_FILE_TMPDIR/conc.out"
	cat >"$BATS_FILE_TMPDIR/conc.sh" <<-SCRIPT
	#!/bin/bash
	export DDP_REPORT_SLEEP=2
	srun -N2 -n2 --overlap --ddp=gloo $REPORT > $BATS_FILE_TMPDIR/a.out &
	srun -N2 -n2 --overlap --ddp=gloo $REPORT > $BATS_FILE_TMPDIR/b.out &
	wait
	SCRIPT
	rm -f "$BATS_FILE_TMPDIR"/[ab].out
	run --separate-stderr sbatch_wait -N2 -o "$out" "$BATS_FILE_TMPDIR/conc.sh"
	assert_success
	pa=$(awk '{print $9}' "$BATS_FILE_TMPDIR/a.out" | sort -u)
	pb=$(awk '{print $9}' "$BATS_FILE_TMPDIR/b.out" | sort -u)
	[ "$(echo "$pa" | wc -l)" -eq 1 ]
	[ "$(echo "$pb" | wc -l)" -eq 1 ]
	[ -n "$pa" ]
	[ -n "$pb" ]
	assert_not_equal "$pa" "$pb"
	# same head for both
	assert_equal "$(cat "$BATS_FILE_TMPDIR"/[ab].out | awk '{print $8}' | sort -u)" "$(node_ip 1)"
}

@test "a heterogeneous step forms one world whose head is component 0's node" {
	# component 0 on node2, component 1 on node1: node1 sorts first in
	# the step's node list, but rank 0 runs on node2
	run --separate-stderr crun srun --ddp=gloo -w node2 -n2 "$REPORT" : -w node1 -n2 "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 4 ]
	assert_equal "$(field 3 | sort -n | tr '\n' ' ')" "0 1 2 3 "
	assert_equal "$(field 5 | sort -u)" "4"
	assert_equal "$(field 8 | sort -u)" "$(node_ip 2)"
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
	assert_equal "$(printf '%s\n' "${T[@]}" | awk '$3==0 {print $2}')" "node2"
}

@test "an arbitrary distribution: the head is task 0's node, and its port is checked there" {
	# node3 runs task 0, node1 sorts first in SLURM_STEP_NODELIST=node[1-3]
	printf 'node3\nnode2\nnode2\nnode1\n' >"$BATS_TEST_TMPDIR/hosts"
	run --separate-stderr crun env SLURM_HOSTFILE="$BATS_TEST_TMPDIR/hosts" \
		srun -n4 -m arbitrary --ddp=gloo "$REPORT"
	assert_success
	tasks
	[ "${#T[@]}" -eq 4 ]
	assert_equal "$(printf '%s\n' "${T[@]}" | awk '$3==0 {print $2}')" "node3"
	assert_equal "$(field 8 | sort -u)" "$(node_ip 3)"
	assert_equal "$(field 9 | sort -u | wc -l)" "1"
	# the same from a -w list, and an unmodified ddp-check agrees on every check
	# (its node pairs held to 25% of the best: the 2 cores carry all three)
	run --separate-stderr crun srun -n3 -m arbitrary -w node2,node3,node1 --ddp=gloo \
		"$REPO/build/bin/ddp-check" -e 64K --timeout 30 --min-pair 25
	assert_success
	assert_line --partial "head node2 (MASTER_ADDR=$(node_ip 2) "
	assert_line --regexp "^OK +env.head +MASTER_ADDR=$(node_ip 2) is an address of node2, which runs RANK 0"
	# the port is checked on task 0's node: busy on node1 is no matter ...
	port=24571
	hold_port 1 "$port"
	run --separate-stderr crun env DDP_PORT=$port srun -n2 -m arbitrary -w node3,node1 --ddp=gloo \
		printenv MASTER_PORT
	assert_success
	# ... and where task 0 runs it fails the step, naming that node
	run --separate-stderr crun env DDP_PORT=$port srun -n2 -m arbitrary -w node1,node3 --ddp=gloo true
	kill "$LISTENER" 2>/dev/null || true
	assert_failure
	[[ "$stderr" == *"ddp: MASTER_PORT $port is not free on the head node (node1)"* ]]
	# srun --export=NONE passes the step only SLURM_* variables: still task 0's node
	run --separate-stderr crun srun --export=NONE -n2 -m arbitrary -w node2,node1 --ddp=gloo \
		/usr/bin/printenv MASTER_ADDR
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort -u)" "$(node_ip 2)"
	# without the plugin no node can know where task 0 is: ddp-env says so
	run --separate-stderr crun srun -n2 -m arbitrary -w node2,node1 "$REPO/build/bin/ddp-env"
	assert_failure
	[[ "$stderr" == *"SLURM_DISTRIBUTION=arbitrary: task 0 runs on the node the host file or -w list names first, not necessarily the first of SLURM_STEP_NODELIST=node[1-2], and only srun knows which: launch the step with srun --ddp"* ]]
}

@test "a failure on a compute node fails only that step, says what and why, drains nothing" {
	run --separate-stderr crun env MASTER_ADDR=nosuch.invalid srun -N2 -n2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: MASTER_ADDR=nosuch.invalid (set in the job's environment): cannot resolve 'nosuch.invalid'"* ]]
	run crun sinfo -h -N -o '%N %T'
	assert_success
	assert_equal "$(printf '%s\n' "$output" | wc -l)" "3"
	refute_output --regexp 'drain|down|fail'
	# the next step runs normally
	run --separate-stderr crun srun -N1 -n1 --ddp=gloo printenv RANK
	assert_success
	assert_output "0"
}
