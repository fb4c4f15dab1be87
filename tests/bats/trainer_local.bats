#!/usr/bin/env bats
# cnn_train without Slurm: the command line, bad data, and data-parallel
# equivalence (2 ranks x batch 32 == 1 rank x batch 64) over loopback with
# the torchrun variables set by hand.
# bats file_tags=trainer

load helpers
plain_data

CNN="$REPO/build/bin/cnn_train"

@test "an unknown option: one-line error, the usage, exit 2" {
	run --separate-stderr "$CNN" --frobnicate
	assert_equal "$status" 2
	assert_equal "$(printf '%s\n' "$stderr" | head -1)" "cnn_train: --frobnicate: unknown option"
	[[ "$stderr" == *"usage: cnn_train [options]"* ]]
}

@test "a malformed value names the option and what was expected" {
	run --separate-stderr "$CNN" --batch-size=-3
	assert_equal "$status" 2
	[[ "$stderr" == *"--batch-size=-3: expected an integer from 1 to 65536"* ]]
}

@test "--help prints the usage and succeeds" {
	run "$CNN" --help
	assert_success
	assert_line --partial "--checkpoint-dir DIR"
}

@test "a data directory without the files names the file" {
	run --separate-stderr "$CNN" --data-dir "$BATS_TEST_TMPDIR" --max-steps 1
	assert_equal "$status" 1
	[[ "$stderr" == *"$BATS_TEST_TMPDIR/train-images-idx3-ubyte: No such file or directory"* ]]
}

@test "a data directory longer than a path can be is refused with its length, exit 2" {
	local long
	long=/$(printf 'd%.0s' $(seq 5000))
	DDP_DATA_DIR=$long run --separate-stderr "$CNN" --max-steps 1
	assert_equal "$status" 2
	assert_equal "$stderr" "cnn_train: the data folder (--data-dir or DDP_DATA_DIR) is 5001 bytes long; expected a path under 4096 bytes"
}

@test "DDP_DATA_DIR is the default data directory" {
	DDP_DATA_DIR=/nonexistent run --separate-stderr "$CNN" --max-steps 1
	assert_equal "$status" 1
	[[ "$stderr" == *"/nonexistent/train-images-idx3-ubyte"* ]]
}

@test "task of a multi-task Slurm step without the contract says to use srun --ddp" {
	SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=4 run --separate-stderr "$CNN" --max-steps 1
	assert_equal "$status" 2
	[[ "$stderr" == *"task 1 of a 4-task Slurm step but RANK and WORLD_SIZE are not set: run it with srun --ddp"* ]]
}

@test "WORLD_SIZE without MASTER_ADDR is refused" {
	RANK=0 WORLD_SIZE=2 run --separate-stderr "$CNN" --max-steps 1
	assert_equal "$status" 2
	[[ "$stderr" == *"WORLD_SIZE=2 but MASTER_ADDR is not set"* ]]
}

@test "a standalone run trains, evaluates and writes its JSON summary, when its first step ended among it" {
	local t0 t1
	t0=$EPOCHREALTIME
	run --separate-stderr "$CNN" --max-steps 20 --eval --test-limit 1000 --train-limit 2560 \
		--log-json "$BATS_TEST_TMPDIR/s.json" --progress lines --log-every 10
	assert_success
	assert_line --regexp '^epoch 1/2 step 20/40 loss [0-9.]+ images/s [0-9]+$'
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(1000 images\)$'
	t1=$EPOCHREALTIME
	run /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert 0 < d["test_accuracy"] <= 1 and d["images_per_sec"] > 0 and d["world_size"] == 1 and len(d["ranks"]) == 1 and d["stopped_by"] is None, d' "$BATS_TEST_TMPDIR/s.json"
	assert_success
	# the first of 20 steps: after the start, before the end
	run /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d["first_step_unix"]; assert float(sys.argv[2]) < t < float(sys.argv[3]), (t, sys.argv[2:])' \
		"$BATS_TEST_TMPDIR/s.json" "$t0" "$t1"
	assert_success
}

# 3 steps (momentum's first two updates), dropout off: the reduction order
# differs (two means averaged vs one mean of 64), so parameters agree to
# float rounding, not bit for bit: measured 3e-8, allowed 1e-6.  Not more
# steps: a rounding-sized difference can flip a discrete choice (a value
# at ReLU's 0, a pool's near-tie) and from there it grows; with conv2's
# bias gradient summed by the pool, at step 4 one conv2 bias differed by
# 1.2e-6, at step 8 the weights by 3.3e-5 (2026-11-29).
@test "2 ranks x batch 32 equal 1 rank x batch 64 after 3 steps" {
	local opts=(--no-dropout --max-steps 3 --train-limit 4096 --progress lines --log-every 1000)
	run "$CNN" "${opts[@]}" --batch-size 64 --dump-params "$BATS_TEST_TMPDIR/one.bin"
	assert_success
	local port
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 \
		timeout 60 "$CNN" "${opts[@]}" --batch-size 32 >"$BATS_TEST_TMPDIR/r1.log" 2>&1 3>&- &
	local pid=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 \
		run timeout 60 "$CNN" "${opts[@]}" --batch-size 32 --dump-params "$BATS_TEST_TMPDIR/two.bin"
	# (once in a CI run rank 1 ran to the 60 s timeout: both ranks' output
	# said if it happens again)
	if ! wait "$pid"; then
		echo "rank 1 did not finish; its output:"
		cat "$BATS_TEST_TMPDIR/r1.log"
		echo "rank 0 ($status):"
		echo "$output"
		return 1
	fi
	assert_success
	assert_line "params: identical on all 2 ranks (crc32 $(printf '%s\n' "$output" | sed -n 's/.*crc32 \([0-9a-f]*\))/\1/p'))"
	run /usr/bin/python3 -c '
import sys, numpy as np
a = np.fromfile(sys.argv[1], np.float32); b = np.fromfile(sys.argv[2], np.float32)
d = float(np.abs(a - b).max()); print(f"max |difference| {d:.3g} over {a.size} parameters")
sys.exit(0 if a.size == b.size == 1199882 and d <= 1e-6 else 1)' "$BATS_TEST_TMPDIR/one.bin" "$BATS_TEST_TMPDIR/two.bin"
	echo "$output"
	assert_success
}

@test "ranks started with different options refuse to train" {
	local port
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 \
		timeout 60 "$CNN" --max-steps 2 --batch-size 16 >"$BATS_TEST_TMPDIR/r1.log" 2>&1 3>&- &
	local pid=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 \
		run --separate-stderr timeout 60 "$CNN" --max-steps 2 --batch-size 32
	# rank 0 stops too, at once (not at the timeout: 124), naming rank 1
	echo "rank 0: status $status: $stderr"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"1 rank's options differ from rank 0's"* ]]
	[[ "$stderr" == *"rank 1 on "*"batch-size=16"* ]]
	wait "$pid" || true
	run cat "$BATS_TEST_TMPDIR/r1.log"
	assert_output --partial "options differ from rank 0's"
	assert_output --partial "batch-size=16"
	refute_output --partial "device=auto puts"
}

# A rank whose gloo cannot start (no such interface on its node) says
# why in the store: rank 0, waiting for its address, stops on it and names
# it, not at --timeout (60 s here: timeout(1)'s 124 would say so).
@test "a rank whose gloo cannot start: the others stop at once, naming it and why" {
	local port
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 DDP_BACKEND=gloo GLOO_SOCKET_IFNAME=nosuch0 \
		timeout 90 "$CNN" --max-steps 2 --timeout 60 >"$BATS_TEST_TMPDIR/r1.log" 2>&1 3>&- &
	local pid=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 DDP_BACKEND=gloo GLOO_SOCKET_IFNAME=lo \
		run --separate-stderr timeout 30 "$CNN" --max-steps 2 --timeout 60
	echo "rank 0: status $status: $stderr"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"rank 0 could not connect its full mesh on lo: a peer failed first (gloo: rank 1 could not connect its full mesh on nosuch0: "*"nosuch0)"* ]]
	! wait "$pid" || false
	run cat "$BATS_TEST_TMPDIR/r1.log"
	assert_output --partial "rank 1 could not connect its full mesh on nosuch0"
}

# gloo's pairs connect after every rank published its address: of the two
# ranks of a pair, the one with the lower address listens and waits for the
# other.  A peer that dies there (or hangs) is never seen by gloo, whose own
# wait is five times --timeout (100 s for 20).  Rank 1 is held at its first
# pair's connect by gdb, then killed or kept; bindport.so gives each rank's
# pair the port that puts rank 0 on the side the test means.

# port_pair: two free ports P and P+1 whose order is the same in network
# byte order (the bytes gloo compares: P's low byte is under 255)
port_pair() {
	/usr/bin/python3 -c '
import socket
for _ in range(100):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    if p & 0xff == 0xff or p + 1 > 65535:
        continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    print(p, p + 1)
    break'
}

# gloo_pair HELD PORT0 PORT1 GDB_COMMAND TIMEOUT_S [FUNCTION]: both ranks,
# rank HELD under gdb, stopped at FUNCTION (its first pair's connect), the
# other as `run` (at most 30 s); rank R's pair listens on PORT<R>, and the
# lower port listens.  Rank 1 starts once rank 0's store listens: TIMEOUT_S
# bounds its connect to the store too, and a loaded machine took longer
# than 2 s to start rank 0 (under gdb or not).
gloo_pair() {
	local port shim="$REPO/build/tests/tools/bindport.so" g="$BATS_TEST_TMPDIR/held.gdb"
	local at=${6:-'gloo::transport::tcp::Pair::connect(std::vector<char, std::allocator<char> > const&)'}
	local held=$1 other=$((1 - $1)) ports=("$2" "$3") after=()
	[ -f "$shim" ] || fail "$shim is not built (make -C tests tools)"
	command -v gdb >/dev/null || fail "gdb is missing (scripts/deps.sh installs it)"
	port=$(free_port)
	# (ss: a listening socket, with no connection made to the store)
	after=(bash -c "until ss -Hltn 'sport = :$port' | grep -q .; do sleep 0.1; done; exec \"\$@\"" _)
	local wait_held=() wait_other=()
	if [ "$held" -eq 1 ]; then wait_held=("${after[@]}"); else wait_other=("${after[@]}"); fi
	printf '%s\n' 'set breakpoint pending on' "break $at" run "$4" kill quit >"$g"
	BINDPORT_PORT=${ports[$held]} LD_PRELOAD=$shim MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 \
		RANK=$held DDP_BACKEND=gloo GLOO_SOCKET_IFNAME=lo timeout 60 "${wait_held[@]}" gdb -batch -x "$g" --args "$CNN" \
		--max-steps 1 --train-limit 64 --test-limit 16 --timeout "$5" --shm-allreduce off >"$BATS_TEST_TMPDIR/held.log" 2>&1 3>&- &
	local pid=$!
	BINDPORT_PORT=${ports[$other]} LD_PRELOAD=$shim MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 \
		RANK=$other DDP_BACKEND=gloo GLOO_SOCKET_IFNAME=lo run --separate-stderr timeout 30 "${wait_other[@]}" "$CNN" \
		--max-steps 1 --train-limit 64 --test-limit 16 --timeout "$5" --shm-allreduce off
	# a rank still held: gdb's children (it and a `shell sleep`) end now
	pkill -KILL -P "$(pgrep -P "$pid")" 2>/dev/null || true
	wait "$pid" || true
	grep -q "hit Breakpoint 1" "$BATS_TEST_TMPDIR/held.log" || { cat "$BATS_TEST_TMPDIR/held.log"; fail "rank $held never reached $at"; }
	echo "rank $other: status $status: $stderr"
}

@test "a rank killed before or after publishing its gloo address: its peer stops at once, naming it, on either side of the pair" {
	local p0 p1
	read -r p0 p1 <<<"$(port_pair)"
	# before: rank 0 waits in the store for its address (it waited for
	# --timeout before the store's wait looked for dead ranks)
	gloo_pair 1 "$p0" "$p1" "echo killed" 60 gloo::rendezvous::Context::connectFullMesh
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ "gloo: rank 0 could not connect its full mesh on lo: rank 1 ("[^\)]+") died while the mesh connected (its connection to the rendezvous closed)" ]]
	# rank 0 listens: it waited out gloo's 300 s before it watched the store
	gloo_pair 1 "$p0" "$p1" "echo killed" 60
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ "gloo: rank 0 could not connect its full mesh on lo: rank 1 ("[^\)]+") died while the mesh connected (its connection to the rendezvous closed)" ]]
	# rank 0 connects (its connection was queued on rank 1's socket): its
	# first all-reduce fails, the store names the dead rank.  Rank 1 dies
	# once that connection is made (it listens on p0): killed before it, rank
	# 0's connect is refused, the case above
	gloo_pair 1 "$p1" "$p0" \
		"shell timeout 20 sh -c 'until ss -Htn state established \"( sport = :$p0 )\" | grep -q .; do sleep 0.1; done'" 60
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ "rank 1 ("[^\)]+") died; gloo: rank 0: all-reduce of " ]]
	# rank 0, the store's host, dies while rank 1 listens (or still waits
	# for rank 0's address: gdb stopped the store's thread too)
	gloo_pair 0 "$p1" "$p0" "echo killed" 60
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"gloo: rank 1 could not connect its full mesh on lo: rank 0 (the rendezvous store) is unreachable, so rank 0 died or its node is gone (rank 1: store at 127.0.0.1:"* ]]
}

@test "a rank that hangs after publishing its gloo address: its peer gives up at its --timeout, not gloo's" {
	local p0 p1
	read -r p0 p1 <<<"$(port_pair)"
	# 10 s: rank 1 starts under gdb, which took more than 2 s to bring it
	# to its address on a loaded machine (Debian 13's make check)
	gloo_pair 1 "$p0" "$p1" "shell sleep 30" 10
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"gloo: rank 0 could not connect its full mesh on lo: not connected after 10.0 s (its timeout): a peer's gloo never answered, and none died or said why"* ]]
}

@test "a resumed run continues where the checkpoint left off" {
	local d="$BATS_TEST_TMPDIR/ck" opts=(--no-dropout --train-limit 1280 --progress lines --log-every 1000 --epochs 2)
	run "$CNN" "${opts[@]}" --max-steps 25 --checkpoint-dir "$d" --dump-params "$BATS_TEST_TMPDIR/a.bin"
	assert_success
	[ -f "$d/checkpoint.bin" ]
	run "$CNN" "${opts[@]}" --checkpoint-dir "$d" --resume --dump-params "$BATS_TEST_TMPDIR/resumed.bin"
	assert_success
	assert_line --partial "# resumed from $d/checkpoint.bin: epoch 2, step 5 of it, 25 steps done"
	assert_line --partial "done: 40 steps"
	# the resumed run's own warm-up: 3 steps from where it started
	assert_line --regexp '^# timed: 12 steps \(29 to 40\), 768 images a rank, [0-9.]+ s of the steps. own time$'
	run "$CNN" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/straight.bin"
	assert_success
	# dropout off, same order of everything: bit-identical to the uninterrupted run
	cmp "$BATS_TEST_TMPDIR/resumed.bin" "$BATS_TEST_TMPDIR/straight.bin"
}

# bg2 OUT ARGS...: ranks 0 and 1 of a world of two over loopback, in the
# background, each its own process (not under timeout(1): a signal must
# reach cnn_train itself); their pids in P0 and P1, output in OUT.r0/.r1.
# A watchdog kills both after 90 s.
bg2() {
	local out=$1 port
	shift
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 GLOO_SOCKET_IFNAME=lo \
		"$CNN" "$@" >"$out.r1" 2>&1 3>&- &
	P1=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 GLOO_SOCKET_IFNAME=lo \
		"$CNN" "$@" >"$out.r0" 2>&1 3>&- &
	P0=$!
	(sleep 90; kill -9 "$P0" "$P1") >/dev/null 2>&1 3>&- &
	DOG=$!
}

# wait2: both ranks' exit statuses in RC0 and RC1, the watchdog ended
wait2() {
	RC0=0 RC1=0
	wait "$P0" || RC0=$?
	wait "$P1" || RC1=$?
	kill "$DOG" 2>/dev/null || true
}

# A signal Slurm sends every task (scancel, preemption, a requeue, the
# time limit; SIGKILL after KillWait) reaches rank 1 alone here, the
# harder case: rank 0 learns it from the store at its next poll, every
# rank stops after the step rank 0 then names, rank 0 writes the
# checkpoint there, and each rank dies by the signal (128+15).  Resumed,
# the run ends bit-identical to an uninterrupted one.
@test "SIGTERM on one rank: every rank stops after the same step, rank 0 keeps a checkpoint there, a resume is bit-identical" {
	local d="$BATS_TEST_TMPDIR" n
	# 100 steps an epoch per rank
	local opts=(--no-dropout --train-limit 3200 --test-limit 200 --batch-size 16 --epochs 1 --progress lines --log-every 1
		--stop-every 8)
	bg2 "$d/stop" "${opts[@]}" --checkpoint-dir "$d/ck" --log-json "$d/stop.json"
	wait_line "$d/stop.r0" '^epoch 1/1 step 20/'
	kill -TERM "$P1"
	wait2
	cat "$d/stop.r0" "$d/stop.r1"
	[ "$RC0" -eq 143 ]
	[ "$RC1" -eq 143 ]
	n=$(sed -n 's/^# a signal on another rank: every rank stops after step \([0-9]*\) and rank 0 writes a checkpoint there$/\1/p' "$d/stop.r0")
	echo "stopped after step $n"
	[ "$n" -ge 24 ]
	[ "$n" -lt 100 ]
	[ $((n % 8)) -eq 0 ]
	grep -qxF "# stopped on a signal on another rank after step $n (epoch 1, step $n of it): $d/ck/checkpoint.bin holds it; --resume, or the job requeued, continues from there" "$d/stop.r0"
	grep -qE '^params: identical on all 2 ranks' "$d/stop.r0"
	grep -qE "^done: $n steps, .*test accuracy not evaluated" "$d/stop.r0"
	# the last step either rank printed is the agreed one
	[ "$(grep -E '^epoch ' "$d/stop.r0" | tail -1 | cut -d' ' -f4)" = "$n/100" ]
	/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["stopped_by"] == "another rank'"'"'s signal" and d["steps"] == int(sys.argv[2]), d' "$d/stop.json" "$n"

	bg2 "$d/resumed" "${opts[@]}" --checkpoint-dir "$d/ck" --resume --dump-params "$d/resumed.bin"
	wait2
	cat "$d/resumed.r0"
	[ "$RC0" -eq 0 ]
	[ "$RC1" -eq 0 ]
	grep -qxF "# resumed from $d/ck/checkpoint.bin: epoch 1, step $n of it, $n steps done" "$d/resumed.r0"
	bg2 "$d/straight" "${opts[@]}" --dump-params "$d/straight.bin"
	wait2
	[ "$RC0" -eq 0 ]
	[ "$RC1" -eq 0 ]
	cmp "$d/resumed.bin" "$d/straight.bin"
}

# SIGUSR2 on rank 0 alone, no --checkpoint-dir; rank 1, stopped by
# another's signal, ends as by SIGTERM.  (Not SIGINT: a shell starts a
# background job with SIGINT ignored, and cnn_train keeps it ignored;
# test_cnn_stop sends it.)
@test "SIGUSR2 on rank 0 without --checkpoint-dir: both stop after the same step, saying nothing was kept" {
	local d="$BATS_TEST_TMPDIR"
	bg2 "$d/int" --train-limit 2000 --batch-size 16 --epochs 1 --progress lines --log-every 1 --stop-every 8
	wait_line "$d/int.r0" '^epoch 1/1 step 10/'
	kill -USR2 "$P0"
	wait2
	cat "$d/int.r0" "$d/int.r1"
	[ "$RC0" -eq 140 ]
	[ "$RC1" -eq 143 ]
	grep -qE '^# SIGUSR2: every rank stops after step [0-9]+ \(no --checkpoint-dir: nothing is kept\)$' "$d/int.r0"
	grep -qE '^# stopped on SIGUSR2 after step [0-9]+ \(epoch 1, step [0-9]+ of it\); no --checkpoint-dir: nothing kept$' "$d/int.r0"
	grep -qE '^params: identical on all 2 ranks' "$d/int.r0"
}


# Rank 0 stops on an error of its own (its checkpoint cannot be written:
# --checkpoint-dir becomes a link to a file mid-run, swapped atomically).
# It marks the store, resets its gloo connections and keeps the store up a
# few seconds: rank 1's all-reduce fails at once and the store still says
# who left.  (Before the reset, rank 1 waited on the open connections until
# rank 0 exited, and then found the store gone with it: "rank 0 (the
# rendezvous store) is unreachable".)
# own_error_mid_run SHM: rank 0 fails to write a checkpoint mid-run
# (--shm-allreduce SHM); both ranks' exit statuses in RC0 and RC1, their
# output in $BATS_TEST_TMPDIR/own.r0 and .r1.
own_error_mid_run() {
	local d="$BATS_TEST_TMPDIR"
	mkdir "$d/ckd"
	touch "$d/file"
	ln -s ckd "$d/ck"
	bg2 "$d/own" --train-limit 6400 --test-limit 200 --batch-size 16 --epochs 1 --progress lines --log-every 1 \
		--checkpoint-dir "$d/ck" --checkpoint-every 8 --shm-allreduce "$1"
	wait_line "$d/own.r0" '^epoch 1/1 step 10/'
	ln -s file "$d/ck.new"
	mv -T "$d/ck.new" "$d/ck"
	wait2
	cat "$d/own.r0" "$d/own.r1"
	[ "$RC0" -eq 1 ]
	[ "$RC1" -eq 1 ]
	# (a save opens the directory once and writes, renames and syncs in
	# it: a swap during a save lands in the next one, which finds a file)
	grep -qE "^cnn_train: [^ ]+ rank 0: checkpoint dir $d/ck: Not a directory$" "$d/own.r0"
	# it stopped in the step after rank 0's last checkpoint, not later
	! grep -qE '^done:' "$d/own.r1" || false
}

@test "rank 0 stops on an error of its own mid-run (a checkpoint it cannot write): rank 1 stops at once, naming it (gloo)" {
	own_error_mid_run off
	grep -q "^# all-reduce: gloo (--shm-allreduce off)$" "$BATS_TEST_TMPDIR/own.r0"
	grep -qE "^cnn_train: [^ ]+ rank 1: rank 0 \([^)]+\) stopped on its own error \(its output says which\) and left; gloo: rank 1: all-reduce of [0-9]+ floats: .*Connection (reset|closed) by peer.*$" "$BATS_TEST_TMPDIR/own.r1"
}

@test "... the same through shared memory: rank 1 stops at once, naming it" {
	own_error_mid_run auto
	grep -q "^# all-reduce: shared memory (every rank on this node)$" "$BATS_TEST_TMPDIR/own.r0"
	grep -qE "^cnn_train: [^ ]+ rank 1: rank 0 \([^)]+\) stopped on its own error \(its output says which\) and left; shared-memory all-reduce: a peer abandoned it$" "$BATS_TEST_TMPDIR/own.r1"
}

@test "ranks of one node all-reduce through shared memory: the same parameters as gloo's, and a rank killed mid-run is named within seconds" {
	local d="$BATS_TEST_TMPDIR" opts=(--no-dropout --train-limit 640 --test-limit 100 --epochs 1 --progress lines --log-every 1000)
	bg2 "$d/shm" "${opts[@]}" --dump-params "$d/shm.bin"
	wait2
	[ "$RC0" -eq 0 ] && [ "$RC1" -eq 0 ] || { cat "$d/shm.r0" "$d/shm.r1"; false; }
	grep -q "^# all-reduce: shared memory (every rank on this node)$" "$d/shm.r0"
	bg2 "$d/gloo" "${opts[@]}" --dump-params "$d/gloo.bin" --shm-allreduce off
	wait2
	[ "$RC0" -eq 0 ]
	[ "$RC1" -eq 0 ]
	# two ranks: each sum is one addition, the same in either order
	cmp "$d/shm.bin" "$d/gloo.bin"
	bg2 "$d/kill" --train-limit 6400 --test-limit 200 --batch-size 16 --epochs 1 --progress lines --log-every 1
	wait_line "$d/kill.r0" '^epoch 1/1 step 5/'
	kill -9 "$P1"
	local t0=$SECONDS
	wait2
	cat "$d/kill.r0"
	[ "$RC0" -eq 1 ]
	[ $((SECONDS - t0)) -lt 10 ]
	grep -qE "^cnn_train: [^ ]+ rank 0: rank 1 \([^)]+\) died; shared-memory all-reduce: a peer left the rendezvous$" "$d/kill.r0"
}

# Resumed with another batch size (or world size: the same arithmetic,
# test_cnn_io): the same place in the epoch's order, in this run's steps,
# said; the rest of the run counted in them.
@test "a checkpoint resumed at another batch size continues at the same place in the epoch, said" {
	local d="$BATS_TEST_TMPDIR/ck" opts=(--train-limit 1280 --progress lines --log-every 1000 --epochs 2)
	run "$CNN" "${opts[@]}" --batch-size 32 --max-steps 7 --checkpoint-dir "$d"
	assert_success
	run "$CNN" "${opts[@]}" --batch-size 64 --checkpoint-dir "$d" --resume
	assert_success
	# 7 steps of 32: 224 images, 3 steps of 64 and half of the fourth again
	assert_line "# note: checkpoint written by 1 rank of batch 32, this run is 1 of 64: its step 7 of epoch 1 is this run's step 3 (3 steps done in this run's count)"
	assert_line --partial "# resumed from $d/checkpoint.bin: epoch 1, step 3 of it, 3 steps done"
	assert_line --regexp '^done: 40 steps, '
	# the same batch again: no note, the checkpoint's own place
	run "$CNN" "${opts[@]}" --batch-size 64 --max-steps 45 --checkpoint-dir "$d" --resume
	assert_success
	refute_line --partial "# note: checkpoint written by"
	assert_line --partial "# resumed from $d/checkpoint.bin: epoch 3, step 0 of it, 40 steps done"
}

# --max-steps reached by an epoch's last step: that epoch's evaluation and
# checkpoint are the run's last (they were once done twice, the second time
# after the next epoch's shuffle), and a resume starts the next epoch.
@test "--max-steps that ends an epoch evaluates once, and a resume starts the next epoch" {
	local d="$BATS_TEST_TMPDIR/ck" opts=(--train-limit 640 --test-limit 200 --progress lines --log-every 1000 --epochs 2)
	run "$CNN" "${opts[@]}" --max-steps 10 --eval --checkpoint-dir "$d"
	assert_success
	assert_equal "$(grep -c '^test: ' <<<"$output")" 1
	assert_line --regexp '^done: 10 steps, .*, test accuracy [0-9.]+%$'
	run "$CNN" "${opts[@]}" --checkpoint-dir "$d" --resume
	assert_success
	assert_line "# resumed from $d/checkpoint.bin: epoch 2, step 0 of it, 10 steps done"
	assert_equal "$(grep -c '^test: ' <<<"$output")" 1
	assert_line --regexp '^done: 20 steps, '
}

@test "a checkpoint of another model or optimizer is refused, naming both" {
	local d="$BATS_TEST_TMPDIR/ck2" data="$BATS_TEST_TMPDIR/idx32"
	run "$CNN" --max-steps 1 --train-limit 640 --checkpoint-dir "$d"
	assert_success
	# an IDX data set of 32x32 images: fc1 changes shape
	mkdir -p "$data"
	/usr/bin/python3 -c '
import struct, sys
d = sys.argv[1]
for split in ("train", "t10k"):
    open(f"{d}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">BBBBIII", 0, 0, 8, 3, 64, 32, 32) + bytes(range(256)) * 256)
    open(f"{d}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">BBBBI", 0, 0, 8, 1, 64) + bytes(i % 10 for i in range(64)))
' "$data"
	run --separate-stderr "$CNN" --data-dir "$data" --max-steps 1 --checkpoint-dir "$d" --resume
	assert_equal "$status" 1
	[[ "$stderr" == *"is for a 1x28x28->10 model (1199882 params), this run's model is 1x32x32->10"* ]]
	run --separate-stderr "$CNN" --max-steps 1 --optimizer adadelta --checkpoint-dir "$d" --resume
	assert_equal "$status" 1
	[[ "$stderr" == *"written with the sgd optimizer, this run uses adadelta"* ]]
}

# The GPU path is a module (build/lib/cnn_train_cuda.so); these run where
# no GPU is, as CI does, and check what a user is told.
@test "--device=auto without an NVIDIA driver trains on the CPU and says why" {
	[ -e /dev/nvidiactl ] && skip "this machine has an NVIDIA driver"
	run --separate-stderr "$CNN" --data synthetic --max-steps 2 --progress lines
	assert_success
	assert_line "# device auto: cpu (no NVIDIA driver here: /dev/nvidiactl is absent)"
	assert_line --partial "# convolutions: oneDNN"
}

@test "the GPU's options on a CPU run are named as unused, not silently dropped" {
	run --separate-stderr "$CNN" --device cpu --data synthetic --max-steps 1 --progress lines \
		--conv1 direct --conv2 cudnn --backward-streams 2 --no-graph
	assert_success
	assert_line "# --no-graph, --backward-streams, --conv1, --conv2: GPU options, not used by this run on the CPU"
	run --separate-stderr "$CNN" --device cpu --data synthetic --max-steps 1 --progress lines
	assert_success
	refute_line --partial "GPU options"
}

@test "--device=cuda without a usable GPU fails and names the cause" {
	[ -f "$REPO/build/lib/cnn_train_cuda.so" ] || skip "built without nvcc: no GPU module"
	nvidia-smi -L >/dev/null 2>&1 && skip "this machine has a GPU"
	run --separate-stderr "$CNN" --device cuda --data synthetic --max-steps 2
	assert_equal "$status" 1
	[[ "$stderr" == *"rank 0: --device=cuda: no CUDA device visible (CUDA_VISIBLE_DEVICES="* ]]
}

@test "--device=cuda with a missing module names the file it tried" {
	CNN_TRAIN_CUDA_MODULE=/nonexistent/cnn_train_cuda.so run --separate-stderr "$CNN" --device cuda \
		--data synthetic --max-steps 2
	assert_equal "$status" 1
	[[ "$stderr" == *"--device=cuda: the GPU module does not load: /nonexistent/cnn_train_cuda.so: cannot open shared object file"* ]]
}

@test "the GPU module exports its entry point only and needs nothing from cnn_train" {
	local so="$REPO/build/lib/cnn_train_cuda.so"
	[ -f "$so" ] || skip "built without nvcc: no GPU module"
	run nm -D --defined-only "$so"
	assert_success
	assert_equal "$(printf '%s\n' "$output" | awk '{print $3}')" "cnn_gpu_api"
	run ldd -r "$so"
	assert_success
	refute_output --partial "undefined symbol"
	assert_output --partial "libcudnn.so"
	assert_output --partial "libnccl.so"
}
