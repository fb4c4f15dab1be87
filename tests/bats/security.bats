#!/usr/bin/env bats
# The rendezvous under attack on a real 2-node Slurm: another user on the
# head node (nobody) runs tests/tools/hostile_peer against the store of a
# 4-rank job that the cluster's unprivileged user runs (rdzv_secret set):
# idle connections, slow handshakes, huge length prefixes, pipelined GETs
# never read, wrong-token handshakes; and a fake store on the job's port.
# docs/security.md records the figures a run printed.
# bats file_tags=slurm

load helpers

PORT=24601

cluster_file 2

setup() {
	cluster_paths
	head -c 32 /dev/urandom >"$DIR/etc/ddp.secret"
	chmod 600 "$DIR/etc/ddp.secret"
	printf 'rdzv_secret: %s\n' "$DIR/etc/ddp.secret" >"$CONF"
	UDIR=$(user_dir)
	# the attacker's own folder: nobody's
	ADIR=$(mktemp -d /tmp/ddp-nobody.XXXXXX)
	chown nobody: "$ADIR"
	ATTACKER=''
}

teardown() {
	[ -z "$ATTACKER" ] || kill "$ATTACKER" 2>/dev/null || true
	[ -z "$ATTACKER" ] || wait "$ATTACKER" 2>/dev/null || true
	restore_conf
	rm -f "$DIR/etc/ddp.secret"
	rm -rf "$UDIR" "$ADIR"
}

# job: the user's 4-rank job on the store at PORT: rank 0 opens the store
# at once, the others join 8 s later (so that they join under the attack
# in full); each rank's all-reduce line, rank 0's peak memory (maxrss_kib,
# of the all-reduce program alone) and the store's refusals on stderr.
job() {
	curun env DDP_PORT=$PORT srun -N2 --ntasks-per-node=2 --ddp=gloo python3 -c '
import os, resource, subprocess, sys, time
if os.environ["RANK"] != "0":
    time.sleep(8)
t0 = time.time()
rc = subprocess.call(sys.argv[1:])
if os.environ["RANK"] == "0":
    print("rank0 maxrss_kib %d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
else:
    print("rank %s joined and reduced in %.3f s" % (os.environ["RANK"], time.time() - t0), file=sys.stderr)
sys.exit(rc)' "$REPO/build/tests/tools/allreduce_check" 1024 60
}

# the figures of a run: rank 0's peak and the joins' longest, for the log
figures() {
	local rss join
	rss=$(sed -n 's/.*rank0 maxrss_kib \([0-9]*\).*/\1/p' <<<"$stderr")
	join=$(sed -n 's/.*joined and reduced in \([0-9.]*\) s.*/\1/p' <<<"$stderr" | sort -n | tail -n1)
	echo "# $1: rank 0 peak RSS $rss KiB; the latest of ranks 1-3 joined and reduced in $join s" >&3
	echo "$rss"
}

@test "hostile peers against a live 4-rank job: the job completes, rank 0 grows by less than 4 MiB, every kind of refusal counted" {
	run --separate-stderr job
	assert_success
	assert_equal "$(grep -c "1024 floats correct" <<<"$output")" "4"
	base=$(figures "without the attack")
	"$CLUSTER" node 1 runuser -u nobody -- "$REPO/build/tests/tools/hostile_peer" attack "$(node_ip 1)" $PORT 30 \
		>"$ADIR/attack.log" 2>&1 &
	ATTACKER=$!
	run --separate-stderr job
	wait "$ATTACKER"
	ATTACKER=''
	cat "$ADIR/attack.log" >&3
	assert_success
	assert_equal "$(grep -c "1024 floats correct" <<<"$output")" "4"
	under=$(figures "under the attack")
	[ "$under" -lt $((base + 4096)) ]
	# the store's last line counts what it refused, each kind
	line=$(grep "rendezvous refused [0-9]* clients in all" <<<"$stderr")
	echo "# $line" >&3
	[[ "$line" =~ \ ([0-9]+)\ wrong\ or\ missing\ token ]]
	[ "${BASH_REMATCH[1]}" -gt 0 ]
	[[ "$line" =~ \ ([0-9]+)\ malformed ]]
	[ "${BASH_REMATCH[1]}" -gt 0 ]
	[[ "$line" =~ \ ([0-9]+)\ closed\ unproven ]]
	[ "${BASH_REMATCH[1]}" -gt 0 ]
	[[ "$line" =~ at\ most\ ([0-9]+)\ unproven\ at\ once ]]
	[ "${BASH_REMATCH[1]}" -le 1024 ]
	# and its lines were rate-limited: 10 at once, then one a second
	[ "$(grep -c "rendezvous refused a client" <<<"$stderr")" -le 60 ]
	nodes_healthy
}

@test "a fake store on the job's port (another user's, first): the ranks stop at once naming the address, and it gets no token" {
	"$CLUSTER" node 1 runuser -u nobody -- "$REPO/build/tests/tools/hostile_peer" server $PORT 40 "$ADIR/seen" \
		>"$ADIR/server.log" 2>&1 &
	ATTACKER=$!
	wait_line "$ADIR/server.log" "listening on port $PORT" 10
	run --separate-stderr curun env MASTER_PORT=$PORT srun -N2 --ntasks-per-node=2 --ddp=gloo bash -c \
		'echo "$DDP_RDZV_TOKEN" >"$1/token.$RANK"; exec "$2" 1024 60' sh "$UDIR" "$REPO/build/tests/tools/allreduce_check"
	assert_failure
	# rank 0 cannot listen; the others stop at the fake's proof
	[[ "$stderr" == *"rank 0 could not listen on port $PORT"* ]]
	[[ "$stderr" == *"store at $(node_ip 1):$PORT: joining: the server there could not prove that it holds this rank's rendezvous token"* ]]
	kill "$ATTACKER"
	wait "$ATTACKER" || true
	ATTACKER=''
	[ -s "$ADIR/seen" ]
	token=$(cat "$UDIR/token.1")
	[[ "$token" =~ ^[0-9a-f]{64}$ ]]
	# no 16 characters of the token anywhere in what it received
	for i in 0 16 32 48; do
		run ! grep -qaF "${token:$i:16}" "$ADIR/seen"
	done
}
