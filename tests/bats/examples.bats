#!/usr/bin/env bats
# Every sbatch example in contrib/sbatch/ runs on the test cluster, as a
# user would submit it (sbatch FILE from the top of the checkout), so no
# example can rot.  The test cluster has no GPU: the GPU examples run on its
# fake GPUs (Gres=gpu:4 per node, tests/topologies/testnode.xml for their
# bus ids) with `--ddp=gloo` on the command line, which overrides the
# file's #SBATCH --ddp=nccl; each example says so itself.  The nodes also
# have gres/shard (8 over their 4 GPUs) for shared-gpus.sbatch.
# bats file_tags=slurm

load helpers
# a PyTorch job of 4 ranks on the 2 cores takes about a minute
BATS_TEST_TIMEOUT=240

EX="contrib/sbatch"
# small runs: the VM's 2 cores carry every node
TORCH_OPTS=(--max-steps 8 --batch-size 32 --train-limit 2048 --test-limit 512)
CNN_OPTS=(--train-limit 2048 --test-limit 512 --batch-size 32)

setup_file() {
	DDP_CLUSTER_SHARING=shard:8 cluster_start 2
	local conf=${DDP_CLUSTER_DIR:-$REPO/build/cluster}/etc/ddp.yaml
	sed -i "s|^topology: .*|topology: $REPO/tests/topologies/testnode.xml|" "$conf"
}

teardown_file() {
	local conf=${DDP_CLUSTER_DIR:-$REPO/build/cluster}/etc/ddp.yaml
	cp "$REPO/conf/ddp.yaml" "$conf" 2>/dev/null || true
	cluster_stop
}

setup() {
	as_user # the jobs are the unprivileged user's
	OUT="$BATS_TEST_TMPDIR/job.out"
	# the tools as a user has them in PATH (here: the build tree's)
	# and Debian's python3 (python3-torch) first, as on a cluster node
	export PATH="$REPO/build/bin:/usr/bin:$PATH"
}

teardown() {
	dump_logs_on_failure
}

# submit FILE [sbatch options --] [script args]: sbatch_wait from the top of
# the checkout; the job's output in $OUT, printed for a failing test.
submit() {
	local file=$1
	shift
	local opts=()
	if [[ " $* " == *" -- "* ]]; then
		while [ "$1" != "--" ]; do opts+=("$1"); shift; done
		shift
	fi
	run sbatch_wait -D "$REPO" -o "$OUT" "${opts[@]}" "$EX/$file" "$@"
	echo "# sbatch $file: $output"
	cat "$OUT" 2>/dev/null || true
}

@test "every example in contrib/sbatch has a test here and starts with what it is for" {
	local f n=0
	for f in "$REPO/$EX"/*.sbatch; do
		n=$((n + 1))
		grep -qE "^@test \"$(basename "$f"): " "$BATS_TEST_FILENAME" || { echo "no test runs $f"; return 1; }
		head -n 2 "$f" | grep -qE '^# [A-Z]' || { echo "$f: no description on line 2"; return 1; }
		grep -qE '^#SBATCH --ddp(=|$)' "$f" || { echo "$f: no #SBATCH --ddp"; return 1; }
	done
	[ "$n" -ge 7 ]
}

@test "single-node-gpus.sbatch: 4 ranks on one node's 4 GPUs (gloo on the fake GPUs)" {
	submit single-node-gpus.sbatch --ddp=gloo -- "${TORCH_OPTS[@]}"
	assert_success
	grep -E "^# world 4, backend gloo, device cpu, master $(node_ip 1):" "$OUT"
	grep -E "^test_accuracy 0\.[0-9]+ images_per_sec [0-9]+ world_size 4$" "$OUT"
	# every rank ends with the same parameters: they trained as one
	[ "$(grep -E '^params rank [0-3] ' "$OUT" | awk '{print $4}' | sort -u | wc -l)" = 1 ]
	[ "$(grep -cE '^params rank [0-3] ' "$OUT")" = 4 ]
}

@test "multi-node-gpus.sbatch: ranks on 2 nodes' GPUs (gloo on the fake GPUs, 2 per node)" {
	submit multi-node-gpus.sbatch --ddp=gloo --ntasks-per-node=2 -- "${TORCH_OPTS[@]}"
	assert_success
	grep -E "^# world 4, backend gloo, device cpu, master $(node_ip 1):" "$OUT"
	grep -E "^test_accuracy 0\.[0-9]+ images_per_sec [0-9]+ world_size 4$" "$OUT"
	[ "$(grep -E '^params rank [0-3] ' "$OUT" | awk '{print $4}' | sort -u | wc -l)" = 1 ]
}

@test "pytorch-multinode.sbatch: an unmodified env:// script on 2 nodes" {
	submit pytorch-multinode.sbatch "${TORCH_OPTS[@]}"
	assert_success
	grep -E "^# world 2, backend gloo, device cpu, master $(node_ip 1):" "$OUT"
	grep -E "^test_accuracy 0\.[0-9]+ images_per_sec [0-9]+ world_size 2$" "$OUT"
}

@test "cpu-only.sbatch: cnn_train, 2 ranks per node, OMP_NUM_THREADS from the plugin" {
	submit cpu-only.sbatch "${CNN_OPTS[@]}"
	assert_success
	grep -E "^done: [0-9]+ steps, [0-9]+ images/s \(4 ranks\), test accuracy" "$OUT"
	# each rank ran as many threads as the plugin's OMP_NUM_THREADS: the
	# cores it bound the task to (the nodes share this machine's cores)
	local omp
	omp=$(crun srun -N2 --ntasks-per-node=2 --cpus-per-task=2 --ddp=gloo printenv OMP_NUM_THREADS | sort -u)
	[[ "$omp" =~ ^[1-9][0-9]*$ ]] || { echo "OMP_NUM_THREADS per task: $omp"; return 1; }
	grep -E "^# batch 32 per rank, .* $omp threads? per rank," "$OUT"
}

@test "shared-gpus.sbatch: 2 ranks on shards of one GPU, a bare --ddp takes gloo" {
	submit shared-gpus.sbatch "${CNN_OPTS[@]}"
	assert_success
	grep -E "^[01]: DDP_BACKEND=gloo CUDA_VISIBLE_DEVICES=0 \(--ddp=auto: the step's GPUs are shared \(gres/shard\)" "$OUT"
	[ "$(grep -cE "^[01]: DDP_BACKEND=gloo CUDA_VISIBLE_DEVICES=0 " "$OUT")" = 2 ]
	grep -E "^# cnn_train: world 2 \(gloo\)" "$OUT"
	grep -E "^done: [0-9]+ steps, [0-9]+ images/s \(2 ranks\), test accuracy" "$OUT"
}

@test "ddp-check-first.sbatch: the check passes, then the training runs" {
	submit ddp-check-first.sbatch "${CNN_OPTS[@]}"
	assert_success
	grep -E "^ddp-check: 38 checks OK, 0 WARN, 0 FAILED$" "$OUT"
	grep -E "^done: [0-9]+ steps, .*\(4 ranks\), test accuracy" "$OUT"
}

@test "ddp-check-first.sbatch: a failing check stops the job before the training" {
	# a fault the check must catch, and Slurm does not: the user's
	# environment names the container bridge (every test node has a decoy
	# docker0 at 172.17.0.1), as a copied script's GLOO_SOCKET_IFNAME=docker0
	# would; the plugin keeps a user's interface
	GLOO_SOCKET_IFNAME=docker0 submit ddp-check-first.sbatch "${CNN_OPTS[@]}"
	assert_failure
	grep -E "^FAIL +net.iface +task 0 \(node1\): GLOO_SOCKET_IFNAME=docker0 is a container or virtual bridge" "$OUT"
	grep -E "^ddp-check: [0-9]+ checks OK, 0 WARN, 2 FAILED, 8 skipped$" "$OUT"
	grep -E "^ddp-check failed: not starting the training" "$OUT"
	! grep -E "^done: " "$OUT" || false
}

@test "cnn_train-requeue.sbatch: requeued mid-run, the same job resumes from its checkpoint" {
	local ck="$BATS_TEST_TMPDIR/ck" i job
	run env CKPT_DIR="$ck" "$CLUSTER" user sbatch --parsable -D "$REPO" -o "$OUT" \
		"$EX/cnn_train-requeue.sbatch" --train-limit 8192 --test-limit 512 --batch-size 16 \
		--checkpoint-every 10 --log-every 10 --stop-every 8
	assert_success
	job=$output
	for ((i = 0; i < 600; i++)); do
		[ -f "$ck/checkpoint.bin" ] && break
		sleep 0.2
	done
	[ -f "$ck/checkpoint.bin" ] || { cat "$OUT"; false; }
	run crun scontrol requeue "$job"
	assert_success
	# Slurm makes a requeued job eligible 2 minutes after its old run ended;
	# once it is pending again, the admin's way to let it start now
	for ((i = 0; i < 300; i++)); do
		crun scontrol show job "$job" 2>/dev/null | grep -q 'JobState=PENDING' && break
		sleep 0.2
	done
	# slurmd refuses a credential created in the second its job's old run
	# was killed ("Job credential revoked": it compares whole seconds), and
	# the backfill (bf_interval=1) would start the job within that second
	sleep 2
	run crun_root scontrol update JobId="$job" StartTime=now # (an admin's)
	assert_success
	# the job runs again (same id) and completes
	for ((i = 0; i < 1500; i++)); do
		crun scontrol show job "$job" 2>/dev/null | grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)' && break
		sleep 0.2
	done
	cat "$OUT"
	crun scontrol show job "$job" | grep -E 'JobState=COMPLETED .*' 
	crun scontrol show job "$job" | grep -E 'Restarts=1'
	grep -E "^# run 1 of job $job, checkpoints in $ck$" "$OUT"
	grep -E "^# run 2 of job $job, checkpoints in $ck$" "$OUT"
	# the requeue's SIGTERM (SIGKILL KillWait seconds later) stopped every
	# rank after one step, and rank 0 kept it: the second run starts there,
	# not at the last --checkpoint-every multiple.  Slurm signals every
	# task: rank 0 names SIGTERM where its own came first, "a signal on
	# another rank" where another rank's reached the agreement before it
	# (seen in a loaded fresh clone's make check)
	local n
	n=$(sed -n -E 's/^# (SIGTERM|a signal on another rank): every rank stops after step ([0-9]+) and rank 0 writes a checkpoint there$/\2/p' "$OUT")
	[ -n "$n" ] || fail "no line of rank 0 saying where every rank stops"
	[ $((n % 8)) -eq 0 ]
	grep -E "^# stopped on (SIGTERM|a signal on another rank) after step $n \(epoch 1, step $n of it\): $ck/checkpoint.bin holds it" "$OUT"
	grep -E "^srun: error: node[12]: tasks [0-9-]+: Terminated$" "$OUT"
	grep -E "^# resumed from $ck/checkpoint.bin: epoch 1, step $n of it, $n steps done \(Slurm requeue\)$" "$OUT"
	grep -E "^done: [0-9]+ steps, .*\(4 ranks\), test accuracy" "$OUT"
}
