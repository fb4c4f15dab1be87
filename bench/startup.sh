#!/bin/bash
# Start-up on the test cluster (2 nodes, a task each): from srun's start to
# the end of the first training step, its gradients all-reduced (rank 0's
# clock, which the nodes share here), for
#   cnn_train         srun --ddp=gloo cnn_train --max-steps 1
#   torch --ddp       srun --ddp=gloo python3 bench/torch_cnn.py --max-steps 1
#                     (the same model and data, PyTorch's DDP over env://)
#   torchrun          srun torchrun --nnodes 2 --rdzv_backend c10d
#                     --rdzv_endpoint <first node>:PORT bench/torch_cnn.py ...
#                     (the sbatch-script way, with USE_LIBUV=0 as --ddp sets for
#                     env://: Debian's PyTorch has no libuv; where torchrun
#                     fails, the first error Python printed: Debian's 1.13
#                     fails in its argument handling, 2.6 and later ask
#                     for libuv in the agent's store whatever USE_LIBUV says)
# and ddp-check --maxbytes 0 (its checks and exact all-reduce, no sweep)
# from srun's start to its verdict.  ROUNDS runs of each, the variants'
# order turning each round; prints each one's median, lowest and highest in
# seconds, and its ratio to cnn_train's median.
#
#   bench/startup.sh                  5 rounds
#   ROUNDS=9 bench/startup.sh
#   tests/cluster/release.sh run 24.11 bench/startup.sh    on another release
#
# Needs root (the test cluster), make, and python3-torch for the PyTorch
# rows.  Starts its own cluster in build/cluster (DDP_CLUSTER_DIR).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/startup_table.sh
. "$repo/bench/startup_table.sh"
cluster=$repo/tests/cluster/cluster.sh
rounds=${ROUNDS:-5}
py=${PYTHON:-/usr/bin/python3}
torchrun=${TORCHRUN:-/usr/bin/torchrun}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ROUNDS=$rounds: expected a count of rounds" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench: needs root (the test cluster)" >&2; exit 2; }
for f in lib/spank_ddp.so bin/cnn_train bin/ddp-check; do
	[ -e "$repo/build/$f" ] || { echo "bench: build/$f is not built (run make)" >&2; exit 2; }
done
"$py" -c 'import torch' 2>/dev/null || { echo "bench: $py has no torch (scripts/deps.sh installs python3-torch)" >&2; exit 2; }

tmp=$(mktemp -d)
"$cluster" start 2 >/dev/null
trap '"$cluster" stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT
slurm=$("$cluster" run srun --version)
step=(-N2 --ntasks-per-node=1)
data=(--max-steps 1 --threads 1)
names=(cnn_train "torch --ddp" torchrun "ddp-check")
files=(cnn torch torchrun check)

# run_variant I ROUND: one run of variant I; prints its seconds, or fails
# with its output in $tmp/out
run_variant() {
	local i=$1 r=$2 t0 t1 json=$tmp/cnn.json port=$((29400 + $2 % 200))
	rm -f "$json"
	t0=$EPOCHREALTIME
	case $i in
	0) "$cluster" run srun --ddp=gloo "${step[@]}" "$repo/build/bin/cnn_train" "${data[@]}" --progress lines \
		--log-json "$json" >"$tmp/out" 2>&1 || return 1
	   t1=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["first_step_unix"])' "$json") ;;
	1) "$cluster" run srun --ddp=gloo "${step[@]}" "$py" "$repo/bench/torch_cnn.py" "${data[@]}" \
		>"$tmp/out" 2>&1 || return 1
	   t1=$(awk '$1 == "first_step_unix" { print $2 }' "$tmp/out") ;;
	2) # shellcheck disable=SC2016 # (expanded in the task)
	   "$cluster" run srun "${step[@]}" --export=ALL,USE_LIBUV=0 sh -c 'exec "$0" --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d \
		--rdzv_id "$SLURM_JOB_ID" --rdzv_endpoint "$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n 1):$1" \
		"$2" "$3" --max-steps 1 --threads 1' "$torchrun" "$port" "$py" "$repo/bench/torch_cnn.py" >"$tmp/out" 2>&1 ||
		return 1
	   t1=$(awk '$1 == "first_step_unix" { print $2 }' "$tmp/out") ;;
	3) "$cluster" run srun --ddp=gloo "${step[@]}" "$repo/build/bin/ddp-check" --maxbytes 0 >"$tmp/out" 2>&1 || return 1
	   t1=$EPOCHREALTIME ;;
	esac
	[ -n "$t1" ] || return 1
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# torchrun's error where it fails (Debian's python3-torch 1.13 and 2.6 both
# do), the others must work
declare -A why
startup_runs "$rounds" 2

torch_v=$("$py" -c 'import torch; print(torch.__version__)')
echo "# start-up: srun ${step[*]} to the end of the first training step (gradients all-reduced), $rounds runs each, interleaved"
echo "# $slurm, PyTorch $torch_v, $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), $(date -u +%F)"
startup_rows
echo "# ddp-check: to its verdict (every check and the exact all-reduce, no bandwidth sweep)"
