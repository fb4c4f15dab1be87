#!/usr/bin/env bats
# The admin's ddp.yaml and plugstack.conf arguments, the user's DDP_*
# variables, bad input, ports under contention and the rendezvous token,
# on a real 2-node Slurm.  srun and slurmstepd read the configuration
# afresh for every step, so each test writes its own.
# bats file_tags=slurm

load helpers

cluster_file 2

setup() {
	as_user # the jobs are the unprivileged user's; the configuration the admin's
	cluster_paths
	PLUGSTACK="$DIR/etc/plugstack.conf"
	cp "$PLUGSTACK" "$BATS_TEST_TMPDIR/plugstack.conf"
}

teardown() {
	dump_logs_on_failure
	[ -n "${LISTENER:-}" ] && kill "$LISTENER" 2>/dev/null || true
	rm -rf "$CONF"
	cp "$REPO/conf/ddp.yaml" "$CONF"
	cp "$BATS_TEST_TMPDIR/plugstack.conf" "$PLUGSTACK"
	rm -f "$DIR/etc/ddp.secret"
}

set_conf() { printf '%s\n' "$@" >"$CONF"; }

# with_secret: a root-only rdzv_secret ($secret) in ddp.yaml
with_secret() {
	secret="$DIR/etc/ddp.secret"
	head -c 32 /dev/urandom >"$secret"
	chmod 600 "$secret"
	set_conf "rdzv_secret: $secret"
}

# Append plugstack.conf arguments to the plugin's line.
plugstack_args() { sed -i "s|^required .*|& $*|" "$PLUGSTACK"; }
# Set plugstack.conf argument KEY to VALUE, in place of the one the test
# cluster gives (a key may not come twice).
plugstack_set() { sed -i -e "s| $1=[^ ]*||" -e "s|^required .*|& $1=$2|" "$PLUGSTACK"; }

no_jobs_queued() {
	run crun squeue -h
	assert_output ""
}

@test "the shipped conf/ddp.yaml is valid and gives every default" {
	run --separate-stderr "$REPO/build/bin/ddp-env" --check-config "$REPO/conf/ddp.yaml"
	assert_success
	assert_line --partial "port_range         20480-32767"
	assert_line --partial "user_overrides     [port_range, network.include, head_from, omp_num_threads, bind]"
	assert_line --partial "bind               auto"
	assert_line --partial "topology           \"\" (discover)"
	assert_line --partial "bind_nic           report"
}

@test "ddp-env --check-config names file:line:column and exits 1" {
	set_conf "default_backend: nccl" "network:" "  include: ib*"
	run --separate-stderr "$REPO/build/bin/ddp-env" --check-config "$CONF"
	assert_failure 1
	assert_equal "$stderr" "ddp-env: $CONF:3:12: network.include: a scalar: expected a list such as [a, b] (or [] for none)"
}

@test "malformed YAML rejects srun --ddp at submit, naming file:line:column; jobs without --ddp still run" {
	set_conf "port_range: [1, 2"
	run --separate-stderr crun srun -N2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF:2:1: malformed YAML: did not find expected ',' or ']'"* ]]
	no_jobs_queued
	run --separate-stderr crun srun -N2 hostname
	assert_success
}

@test "an unknown key rejects sbatch --ddp at submit, nothing queued" {
	set_conf "port_rang: 20000-21000"
	run --separate-stderr crun sbatch --ddp=gloo --wrap true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF:1:1: unknown key 'port_rang': expected default_backend, allowed_backends, port_range"* ]]
	no_jobs_queued
}

@test "a wrong type and an out-of-range value are refused at submit, saying what was expected" {
	set_conf "omp_num_threads: [4]"
	run --separate-stderr crun srun --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF:1:18: omp_num_threads: a list: expected a single value"* ]]
	set_conf "port_range: 30000-20000"
	run --separate-stderr crun salloc --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF:1:13: port_range: '30000-20000' is inverted: expected LOW-HIGH with LOW <= HIGH"* ]]
	set_conf "port_range: 30000-"
	run --separate-stderr crun srun --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"'30000-': expected LOW-HIGH, two port numbers 1-65535 (an empty range is refused)"* ]]
}

@test "a configuration that is missing, empty or a directory rejects --ddp at submit" {
	rm -f "$CONF"
	run --separate-stderr crun srun --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF: No such file or directory: expected a readable YAML file"* ]]
	: >"$CONF"
	run --separate-stderr crun srun --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF: empty: expected a mapping of settings (write {} to take every default)"* ]]
	rm -f "$CONF"
	mkdir "$CONF"
	run --separate-stderr crun sbatch --ddp=gloo --wrap true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF: is a directory: expected a YAML file"* ]]
	no_jobs_queued
	nodes_healthy
}

@test "allowed_backends: a backend the site does not allow is refused at submit" {
	set_conf "allowed_backends: [gloo]"
	run --separate-stderr crun srun --ddp=nccl --gres=gpu:1 true
	assert_failure
	[[ "$stderr" == *"ddp: --ddp=nccl: backend not allowed here: allowed_backends is [gloo] ($CONF:1:19)"* ]]
	run --separate-stderr crun srun -n1 --ddp=gloo printenv DDP_BACKEND
	assert_success
	assert_output "gloo"
}

@test "a partition's section applies to its jobs; the admin's variables yield to the user's" {
	set_conf "port_range: 30000-30999" "partitions:" "  debug:" "    port_range: 31000-31000" \
		"    env:" "      gloo: {GLOO_SITE_VAR: site, MY_VAR: site}"
	run --separate-stderr crun env MY_VAR=mine srun -N2 -n2 --ddp=gloo \
		bash -c 'echo "$MASTER_PORT $GLOO_SITE_VAR $MY_VAR"'
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort -u)" "31000 site mine"
	run --separate-stderr crun srun -n1 --ddp=gloo "$REPO/build/bin/ddp-env" --explain
	assert_success
	assert_line --regexp "^MASTER_PORT +31000 +port_range 31000-31000 \\($CONF:4:17 \\(partition debug\\)\\)"
	assert_line --regexp "^GLOO_SITE_VAR +site +env.gloo \\($CONF:6:13 \\(partition debug\\)\\)"
	assert_line "# config: $CONF"
}

@test "plugstack.conf arguments override the file; an unknown one rejects at submit" {
	set_conf "port_range: 30000-30999"
	plugstack_args "port_range=31500-31500" "env.gloo.GLOO_FROM_PLUGSTACK=yes"
	run --separate-stderr crun srun -n1 --ddp=gloo bash -c 'echo "$MASTER_PORT $GLOO_FROM_PLUGSTACK"'
	assert_success
	assert_output "31500 yes"
	plugstack_args "portrange=1-2"
	run --separate-stderr crun srun -n1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: plugstack.conf argument 'portrange=1-2': unknown key 'portrange': expected config, config_cache, default_backend"* ]]
	no_jobs_queued
}

@test "DDP_PORT: a port is used; a bad one is refused at submit; one the admin does not allow is refused" {
	run --separate-stderr crun env DDP_PORT=23456 srun -N2 -n2 --ddp=gloo printenv MASTER_PORT
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort -u)" "23456"
	for bad in abc 0 70000 -5 ''; do
		run --separate-stderr crun env DDP_PORT="$bad" srun -n1 --ddp=gloo true
		assert_failure
		[[ "$stderr" == *"ddp: DDP_PORT=$bad (set in the job's environment): expected a port number 1-65535"* ]]
	done
	run --separate-stderr crun env DDP_PORT_RANGE=30000-20000 srun -n1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: DDP_PORT_RANGE (set in the job's environment): '30000-20000' is inverted"* ]]
	set_conf "user_overrides: [head_from]"
	run --separate-stderr crun env DDP_PORT=23456 srun -n1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: DDP_PORT=23456: this cluster does not let users override port_range (user_overrides, $CONF:1:17); unset it"* ]]
	no_jobs_queued
}

@test "an interface pattern that matches nothing fails the step on the node, naming it; drains nothing" {
	set_conf "network: {include: [ib*]}"
	run --separate-stderr crun srun -N2 -n2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: network.include [ib*] ($CONF:1:20) match no up interface of the head's address family here (interfaces: lo 127.0.0.1/8"* ]]
	[[ "$stderr" == *"docker0 172.17.0.1/16"* ]]
	nodes_healthy
	# DDP_IFACE: the user narrows it the same way
	set_conf "{}"
	run --separate-stderr crun env DDP_IFACE='enp*' srun -N2 -n2 --ddp=gloo printenv GLOO_SOCKET_IFNAME
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort | tr '\n' ' ')" "enp1s0 enp2s0 "
}

@test "more tasks on a node than GPUs under --ddp=nccl fails the step, naming the counts" {
	run --separate-stderr crun srun -N1 -n2 --gres=gpu:1 --ddp=nccl true
	assert_failure
	[[ "$stderr" == *"node 0 runs 2 tasks of the step but has 1 GPU(s) for it (SLURM_STEP_GPUS): NCCL cannot share a GPU between ranks"* ]]
	run --separate-stderr crun srun -N1 -n2 --ddp=nccl true
	assert_failure
	[[ "$stderr" == *"the step has no GPU there (SLURM_STEP_GPUS unset): NCCL needs one GPU per task"* ]]
	run --separate-stderr crun srun -N1 -n2 --gres=gpu:2 --ddp=nccl printenv DDP_BACKEND
	assert_success
	assert_equal "$(printf '%s\n' "$output" | sort -u)" "nccl"
	nodes_healthy
}

@test "variables of absurd length fail cleanly: at submit or in the step, never half-set" {
	long=$(head -c 100000 /dev/zero | tr '\0' a)
	run --separate-stderr crun env DDP_IFACE="$long" srun -n1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: DDP_IFACE (set in the job's environment): an item of 100000 characters: expected under 256"* ]]
	addr=$(head -c 5000 /dev/zero | tr '\0' h)
	run --separate-stderr crun env MASTER_ADDR="$addr" srun -n1 --ddp=gloo printenv RANK
	assert_failure
	# read whole (a job variable may be long: task/affinity's SLURM_CPU_BIND), then refused
	[[ "$stderr" == *"ddp: MASTER_ADDR (set in the job's environment) is 5000 characters: expected a host name or address"* ]]
	refute_output --partial "0"
	nodes_healthy
}

@test "the head's port in use fails the step, naming the port and how to override it" {
	port=24567
	hold_port 1 "$port"
	run --separate-stderr crun env DDP_PORT=$port srun -N2 -n2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: MASTER_PORT $port is not free on the head node (node1): port $port: Address already in use; another program holds it. Run this step with DDP_PORT=<a free port> (or MASTER_PORT)"* ]]
	# the same port on another head is fine
	run --separate-stderr crun env DDP_PORT=$port srun -N1 -w node2 --ddp=gloo printenv MASTER_PORT
	assert_success
	assert_output "$port"
	nodes_healthy
}

# Each step holds its MASTER_PORT on the head (as a rendezvous server does)
# for 3 s and prints it; a collision would fail a bind.
HOLD='import os, socket, time
s = socket.socket(); s.bind(("0.0.0.0", int(os.environ["MASTER_PORT"]))); s.listen(1)
print("port", os.environ["MASTER_PORT"], os.environ["TORCHELASTIC_RUN_ID"], flush=True); time.sleep(3)'

@test "16 concurrent steps of 4 jobs sharing one head get 16 different free ports" {
	printf '#!/bin/bash\nfor i in 1 2 3 4; do srun -n1 --overlap --ddp=gloo /usr/bin/python3 -c "$HOLD" & done; wait\n' \
		>"$BATS_TEST_TMPDIR/job.sh"
	for j in 1 2 3 4; do
		run --separate-stderr crun env HOLD="$HOLD" sbatch --parsable -w node1 -n1 \
			-o "$BATS_TEST_TMPDIR/out.$j" "$BATS_TEST_TMPDIR/job.sh"
		assert_success
	done
	for _ in $(seq 1 60); do
		[ -z "$(crun squeue -h)" ] && break
		sleep 0.5
	done
	cat "$BATS_TEST_TMPDIR"/out.* >&3 || true
	run cat "$BATS_TEST_TMPDIR"/out.1 "$BATS_TEST_TMPDIR"/out.2 "$BATS_TEST_TMPDIR"/out.3 "$BATS_TEST_TMPDIR"/out.4
	assert_equal "$(printf '%s\n' "$output" | grep -c '^port ')" "16"
	assert_equal "$(printf '%s\n' "$output" | awk '/^port /{print $2}' | sort -u | wc -l)" "16"
	refute_output --partial "rror"
}

@test "rdzv_secret: one token per step, the same on every node; a forged token is refused and logged (steps of the unprivileged user)" {
	local udir
	udir=$(user_dir)
	with_secret
	run --separate-stderr curun srun -N2 -n4 --ddp=gloo printenv DDP_RDZV_TOKEN
	assert_success
	assert_equal "$(printf '%s\n' "$output" | wc -l)" "4"
	assert_equal "$(printf '%s\n' "$output" | sort -u | wc -l)" "1"
	[[ "$(printf '%s\n' "$output" | head -n1)" =~ ^[0-9a-f]{64}$ ]]
	first=$(printf '%s\n' "$output" | head -n1)
	run --separate-stderr curun srun -N2 -n2 --ddp=gloo printenv DDP_RDZV_TOKEN
	assert_success
	[ "$(printf '%s\n' "$output" | sort -u)" != "$first" ]
	# the rendezvous accepts the step's tasks ...
	run --separate-stderr curun srun -N2 -n2 --ddp=gloo "$REPO/build/tests/tools/allreduce_check" 1024
	assert_success
	# ... and refuses one that forged its token, which rank 0 logs
	run --separate-stderr curun srun -N2 -n2 --ddp=gloo bash -c \
		'[ "$RANK" = 1 ] && export DDP_RDZV_TOKEN=forged; exec '"$REPO/build/tests/tools/allreduce_check"' 1024 3'
	assert_failure
	# (it stops at rank 0's proof, which does not fit its token, and
	# sends nothing of its own)
	[[ "$stderr" == *"could not prove that it holds this rank's rendezvous token (DDP_RDZV_TOKEN)"* ]]
	[[ "$stderr" == *"rank 0 (node1): rendezvous refused a client at $(node_ip 2):"*"(it said rank 1 of 2): it left after the challenge without a proof: its rendezvous token (DDP_RDZV_TOKEN) is not this step's"* ]]
	run --separate-stderr curun srun -n1 --ddp=gloo bash -c \
		'"$1" --explain; echo "token $DDP_RDZV_TOKEN"; "$1" >"$2"; . "$2"; echo "eval $DDP_RDZV_TOKEN"' \
		sh "$REPO/build/bin/ddp-env" "$udir/env.sh"
	assert_success
	assert_line "# rendezvous token: DDP_RDZV_TOKEN from rdzv_secret $secret ($CONF:1:14)"
	# the token is never printed: masked by --explain, not among the
	# exports (eval keeps the task's own)
	token=$(sed -n 's/^token //p' <<<"$output")
	[[ "$token" =~ ^[0-9a-f]{64}$ ]]
	assert_line --regexp "^DDP_RDZV_TOKEN +\(hidden\) +HMAC of"
	[ "$(grep -c "$token" <<<"$output")" -eq 2 ] # the two echo lines
	assert_line "eval $token"
	run ! grep -q "$token" "$udir/env.sh"
	run grep -c "^export MASTER_PORT=" "$udir/env.sh"
	rm -rf "$udir"
	assert_output "1"
}

@test "a modified srun (a user's) that claims another job's or step's ids is refused, and never gets that step's token" {
	local forge="$REPO/build/tests/tools/forge_env.so" a
	with_secret
	run --separate-stderr crun srun -n1 --ddp=gloo bash -c 'echo "$SLURM_JOB_ID $SLURM_STEP_ID $DDP_RDZV_TOKEN"'
	assert_success
	read -r -a a <<<"$output"
	[[ "${a[2]}" =~ ^[0-9a-f]{64}$ ]]
	# another job's srun says it is that step (forge_env.so: what a
	# user's own build of srun can send slurmstepd)
	run --separate-stderr curun env LD_PRELOAD="$forge" FORGE_SLURM_JOB_ID="${a[0]}" \
		FORGE_SLURM_STEP_ID="${a[1]}" srun -n1 --ddp=gloo printenv DDP_RDZV_TOKEN
	assert_failure
	[[ "$stderr" == *"ddp: SLURM_JOB_ID=${a[0]} in the step's environment, but Slurm authenticated job "*": the environment srun sent is not this step's (a modified srun or environment?): refused"* ]]
	[[ "$output$stderr" != *"${a[2]}"* ]]
	# (a forged SLURM_STEP_ID never reaches the plugin: slurmstepd sets
	# its own first; tests/unit/test_config.c refuses one)
	# the shim does reach slurmstepd: without --ddp the forged variable is there
	run --separate-stderr curun env LD_PRELOAD="$forge" FORGE_DDP_FORGED=1 srun -n1 printenv DDP_FORGED
	assert_success
	assert_output "1"
	nodes_healthy
}

@test "rdzv_secret in a heterogeneous step: one token for its components (the leader's id, the user's uid), and its ranks join" {
	with_secret
	run --separate-stderr curun srun --ddp=gloo -w node2 -n2 printenv DDP_RDZV_TOKEN : -w node1 -n2 printenv DDP_RDZV_TOKEN
	assert_success
	assert_equal "$(printf '%s\n' "$output" | wc -l)" "4"
	assert_equal "$(printf '%s\n' "$output" | sort -u | wc -l)" "1"
	run --separate-stderr curun srun --ddp=gloo -w node2 -n2 "$REPO/build/tests/tools/allreduce_check" 1024 : \
		-w node1 -n2 "$REPO/build/tests/tools/allreduce_check" 1024
	assert_success
	assert_equal "$(grep -c "1024 floats correct" <<<"$output")" "4"
}

@test "as documented: a ddp.yaml the user cannot read fails the submit naming it; a root-only secret still gives the user's steps their token" {
	with_secret
	run --separate-stderr curun srun -N2 -n2 --ddp=gloo printenv DDP_RDZV_TOKEN
	assert_success
	[[ "$(printf '%s\n' "$output" | sort -u)" =~ ^[0-9a-f]{64}$ ]]
	run --separate-stderr curun cat "$secret"
	assert_failure
	chmod 600 "$CONF"
	run --separate-stderr curun srun -n1 --ddp=gloo true
	chmod 644 "$CONF"
	assert_failure
	[[ "$stderr" == *"ddp: $CONF: Permission denied: expected a readable YAML file"* ]]
	# root reads it as before
	chmod 600 "$CONF"
	run --separate-stderr crun_root srun -n1 --ddp=gloo true
	chmod 644 "$CONF"
	assert_success
}

@test "an rdzv_secret others can read, or a missing one, fails the step saying how to fix it" {
	secret="$DIR/etc/ddp.secret"
	head -c 32 /dev/urandom >"$secret"
	chmod 644 "$secret"
	set_conf "rdzv_secret: $secret"
	run --separate-stderr crun srun -N2 -n2 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: rdzv_secret $secret: owner uid 0, mode 0644: expected owned by root with mode 0600 or 0400"* ]]
	rm -f "$secret"
	run --separate-stderr crun srun -N1 -n1 --ddp=gloo true
	assert_failure
	[[ "$stderr" == *"ddp: rdzv_secret $secret: No such file or directory"* ]]
	nodes_healthy
}

@test "without a secret, ddp-env --explain says any client can join" {
	run --separate-stderr crun srun -n1 --ddp=gloo "$REPO/build/bin/ddp-env" --explain
	assert_success
	assert_line "# rendezvous token: none: no rdzv_secret configured; any client that reaches MASTER_ADDR:MASTER_PORT can join the rendezvous"
	refute_line --partial "DDP_RDZV_TOKEN"
}

@test "topology_cache: the first step keeps the node's topology and its mapped copy, the next map it, a corrupt one is written anew, one hwloc refuses passed over; \"\" keeps none" {
	local cache="$DIR/topology-cache" f ino shm sino
	rm -rf "$cache"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	f=$(ls "$cache"/topology-*.xml)
	shm=${f%.xml}.shm
	# root's, readable by all, writable by root alone; named for this boot
	assert_equal "$(stat -c '%u %a' "$cache" "$f" "$shm" | tr '\n' ' ')" "0 755 0 644 0 644 "
	[[ "$f" == "$cache/topology-$(cat /proc/sys/kernel/random/boot_id)-hwloc"* ]]
	ino=$(stat -c %i "$f")
	sino=$(stat -c %i "$shm")
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 bash -c 'echo "$SLURM_LOCALID $DDP_BIND_TOPOLOGY"'
	assert_success
	assert_line "0 this machine (hwloc, mapped from $shm)"
	assert_line "1 this machine (hwloc, mapped from $shm)"
	assert_equal "$(stat -c %i "$f") $(stat -c %i "$shm")" "$ino $sino"
	# the copy changed inside (as only root could): the next step's
	# check (its CRC-32) writes it anew before its tasks map it
	printf 'ZZZZ' | dd of="$shm" bs=1 seek=$(($(getconf PAGESIZE) + 64)) conv=notrunc status=none
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	[ "$(stat -c %i "$shm")" != "$sino" ]
	# not this program's copy at all: refused by the tasks (the export
	# read instead) until the next step's check writes it anew
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 bash -c 'echo "$DDP_BIND_TOPOLOGY"'
	assert_success
	assert_output "this machine (hwloc, mapped from $shm)"
	echo 'not an export' >"$f"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	[ "$(stat -c %i "$f")" != "$ino" ]
	assert_equal "$(head -c 5 "$f")" "<?xml"
	# whole at its end but not hwloc's (each step reads only the end),
	# its mapped copy gone: no copy made of it, the step discovers, binds
	# as planned, and slurmd's log names the file
	printf '<?xml version="1.0"?>\n<topology>not hwloc'"'"'s</topology>\n' >"$f"
	rm "$shm"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	[ ! -e "$shm" ]
	grep -q "ddp: topology $f: cannot be read as an hwloc XML file .*; the step reads the kept export instead" \
		"$DIR"/log/slurmd.node*.log
	grep -q "ddp: topology_cache: topology $f: .*; the step discovers the node's topology" "$DIR"/log/slurmd.node*.log
	rm -rf "$cache"
	plugstack_set topology_cache ''
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	[ ! -e "$cache" ]
}

# step_started NAME ARGS...: a step of the test user's job NAME (srun's
# ARGS, its tasks sleeping 8 s) in the background, once a task of it runs:
# STEP_BG the background srun's shell, STEP_STEPD its slurmstepd.  1, said,
# when no task runs within 7 s.
step_started() {
	local name=$1 task='' i job
	shift
	crun srun -J "$name" "$@" sleep 8 &
	STEP_BG=$! STEP_STEPD=''
	for ((i = 0; i < 70; i++)); do
		[ -z "$task" ] || break
		sleep 0.1
		# this job's (make check's other worker runs clusters too)
		job=$(crun squeue -h -n "$name" -o %i 2>/dev/null) && [ -n "$job" ] || continue
		STEP_STEPD=$(pgrep -n -f "^slurmstepd: \\[$job\\.0\\]") || continue
		task=$(pgrep -P "$STEP_STEPD" -x sleep | head -n 1) || task=''
	done
	[ -n "$task" ] || { echo "no task of the step ran"; wait "$STEP_BG" 2>/dev/null; return 1; }
}

# HWLOC plugins (.../hwloc/hwloc_NAME.so) mapped in the slurmstepd of a
# two-task step of the test user's, read by root once its tasks run.
stepd_hwloc_plugins() {
	step_started "plugins-$$" --ddp=gloo -N1 -n2 || return 1
	grep -c '/hwloc/hwloc_.*\.so' "/proc/$STEP_STEPD/maps" || true
	wait "$STEP_BG" 2>/dev/null || true
}

@test "topology_cache: a step's slurmstepd opens none of hwloc's plugins (each task's child reads the kept export without them); discovering, it opens them" {
	compgen -G "/usr/lib/*/hwloc/hwloc_*.so" >/dev/null ||
		skip "no libhwloc-plugins here (Debian 13's and unstable's roots have it: tests/cluster/release.sh check)"
	rm -rf "$DIR/topology-cache"
	run crun srun --ddp=gloo -N1 -n1 true # the boot's first step writes the export
	assert_success
	run --separate-stderr stepd_hwloc_plugins
	assert_success
	assert_output 0
	plugstack_set topology_cache ''
	run --separate-stderr stepd_hwloc_plugins
	assert_success
	[ "$output" -gt 0 ] || fail "discovery in slurmstepd mapped no hwloc plugin: this test cannot tell the two apart"
}

@test "topology_cache in a folder others can write: not used, the step binds as without it, slurmd's log says why" {
	local cache="$BATS_TEST_TMPDIR/open-cache"
	mkdir -m 0777 "$cache"
	plugstack_set topology_cache "$cache"
	run --separate-stderr crun srun --ddp=gloo -N1 -n2 "$BIND_REPORT"
	assert_success
	assert_matches_plan 2
	[ -z "$(ls -A "$cache")" ]
	grep -q "ddp: topology_cache $cache: expected a folder of root's that only root can write (owner uid 0, mode 0777): not used" \
		"$DIR"/log/slurmd.node*.log
}

@test "config_cache: a step keeps ddp.yaml's parse once the file has settled and the next read it back; an edit takes effect at the next step; a folder others can write is not used" {
	local cache="$DIR/config-cache" f ino port
	rm -rf "$cache"
	set_conf "port_range: 30000-30099"
	sleep 1.2 # a parse is kept of a file last changed over a second before
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 printenv MASTER_PORT
	assert_success
	((output >= 30000 && output <= 30099))
	f=$(ls "$cache"/config-*.bin)
	# root's (slurmstepd's, as root), readable by all as ddp.yaml is
	assert_equal "$(stat -c '%u %a' "$cache" "$f" | tr '\n' ' ')" "0 755 0 644 "
	ino=$(stat -c %i "$f")
	# read back: a settled file parsed again would be kept anew (another inode)
	run --separate-stderr crun srun --ddp=gloo -N2 -n2 printenv MASTER_PORT
	assert_success
	port=${lines[0]}
	((port >= 30000 && port <= 30099))
	assert_equal "$(stat -c %i "$f")" "$ino"
	# edited: the next step has the new range at once, and keeps it
	set_conf "port_range: 30200-30299"
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 printenv MASTER_PORT
	assert_success
	((output >= 30200 && output <= 30299))
	sleep 1.2
	run crun srun --ddp=gloo -N1 -n1 true
	assert_success
	[ "$(stat -c %i "$f")" != "$ino" ]
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 printenv MASTER_PORT
	assert_success
	((output >= 30200 && output <= 30299))
	# an edit in error is refused at submit, as without a cache
	set_conf "port_range: 9-1"
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 true
	assert_failure
	[[ "$stderr" == *"ddp: $CONF:1:13: port_range: '9-1' is inverted"* ]]
	# a folder others can write: nothing read or kept there, steps as before
	set_conf "port_range: 30000-30099"
	sleep 1.2
	mkdir -m 0777 "$BATS_TEST_TMPDIR/open-cache"
	plugstack_set config_cache "$BATS_TEST_TMPDIR/open-cache"
	run --separate-stderr crun srun --ddp=gloo -N1 -n1 printenv MASTER_PORT
	assert_success
	((output >= 30000 && output <= 30099))
	[ -z "$(ls -A "$BATS_TEST_TMPDIR/open-cache")" ]
}

# The shared objects mapped in srun and in the slurmstepd of a one-task
# step of srun's ARGS, read by root once its task runs: "srun FILE" and
# "stepd FILE", a line each, by file name.
step_objects() {
	local name="objects-$$" srun p
	step_started "$name" "$@" -N1 -n1 || return 1
	srun=$(pgrep -n -f "^srun -J $name ") || { echo "no srun"; wait "$STEP_BG" 2>/dev/null; return 1; }
	for p in "srun $srun" "stepd $STEP_STEPD"; do
		awk -v who="${p%% *}" '$6 ~ /\.so/ { n = split($6, q, "/"); print who " " q[n] }' "/proc/${p#* }/maps" | sort -u
	done
	crun scancel -n "$name" # read: the task need not sleep on
	wait "$STEP_BG" 2>/dev/null || true
}

@test "nettle and libyaml are opened where a step needs them only: neither by srun or slurmstepd without --ddp; neither libyaml nor zlib with ddp.yaml's kept parse; nettle by a --ddp step's slurmstepd under rdzv_secret; libcrypto never" {
	set_conf "port_range: 30000-30099"
	sleep 1.2 # settled: the next step keeps its parse (config_cache)
	run crun srun --ddp=gloo -N1 -n1 true
	assert_success
	run --separate-stderr step_objects
	assert_success
	# the plugin is there: these are the processes' own objects
	assert_line "srun spank_ddp.so"
	assert_line "stepd spank_ddp.so"
	refute_line --regexp '^(srun|stepd) lib(crypto|nettle|yaml|z\.so)'
	run --separate-stderr step_objects --ddp=gloo
	assert_success
	assert_line "stepd spank_ddp.so"
	# the kept parse and the kept topology: sealed with their times, no checksum
	refute_line --regexp '^(srun|stepd) lib(crypto|nettle|yaml|z\.so)'
	with_secret
	set_conf "rdzv_secret: $secret" "port_range: 30000-30099"
	sleep 1.2
	run crun srun --ddp=gloo -N1 -n1 true
	assert_success
	run --separate-stderr step_objects --ddp=gloo
	assert_success
	# the token: nettle's HMAC (libddpenv/src/hmac.c says why not OpenSSL's)
	assert_line --regexp '^stepd libnettle\.so\.[0-9.]+$'
	refute_line --regexp '^(srun|stepd) libcrypto|^srun libnettle|^(srun|stepd) libyaml'
}
