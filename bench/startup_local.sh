#!/bin/bash
# Start-up on one machine without Slurm (the GPU machine: .gpu/run.sh
# startup): NPROC processes (2), from their launch to the end of rank 0's
# first training step on CPUs, its gradients all-reduced over gloo (rank
# 0's clock; on a GPU machine too: what is timed is the launch), for
#   cnn_train      NPROC cnn_train processes started with the env://
#                  contract already set, as srun --ddp=gloo starts a step's
#                  tasks (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
#                  GROUP_RANK, MASTER_ADDR 127.0.0.1, a free MASTER_PORT,
#                  DDP_BACKEND gloo, GLOO_SOCKET_IFNAME lo, USE_LIBUV 0)
#   torch env://   the same for python3 bench/torch_cnn.py (PyTorch's DDP)
#   torchrun       python3 -m torch.distributed.run --standalone
#                  --nproc_per_node NPROC bench/torch_cnn.py: its agent,
#                  its c10d rendezvous, then its workers; where it fails, the
#                  first error Python printed (Debian's 1.13 in its argument
#                  handling, 2.6 and later for want of libuv: where the error
#                  asks for USE_LIBUV=0, torchrun runs with it)
#   ddp-check      ddp-check --maxbytes 0 in NPROC processes, to its verdict
# ROUNDS runs of each (5), the variants' order turning each round; each
# one's median, lowest and highest in seconds, and its ratio to cnn_train's.
# What torchrun's launch adds to the same script started as --ddp starts
# it, on a PyTorch whose torchrun works; bench/startup.sh is the same on the
# test cluster, from srun's start.
#
#   bench/startup_local.sh
#   ROUNDS=9 NPROC=4 bench/startup_local.sh
#   PYTHON=python3 CNN_TRAIN=... DDP_CHECK=... bench/startup_local.sh
#                    another Python and programs (.gpu/run.sh startup)
#
# Needs the programs built (make) and a Python with torch; the data from
# DDP_DATA_DIR (default /usr/share/datasets/fashion-mnist).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/startup_table.sh
. "$repo/bench/startup_table.sh"
rounds=${ROUNDS:-5}
nproc_=${NPROC:-2}
py=${PYTHON:-/usr/bin/python3}
cnn=${CNN_TRAIN:-$repo/build/bin/cnn_train}
check=${DDP_CHECK:-$repo/build/bin/ddp-check}
data=${DDP_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ROUNDS=$rounds: expected a count of rounds" >&2; exit 2; }
[[ "$nproc_" =~ ^[1-9][0-9]?$ ]] || { echo "bench: NPROC=$nproc_: expected a count of processes, 1 to 99" >&2; exit 2; }
for p in "$cnn" "$check"; do
	[ -x "$p" ] || { echo "bench: $p is not built (run make)" >&2; exit 2; }
done
"$py" -c 'import torch' 2>/dev/null || { echo "bench: $py has no torch" >&2; exit 2; }
[ -r "$data/train-images-idx3-ubyte.gz" ] || [ -r "$data/train-images-idx3-ubyte" ] ||
	{ echo "bench: no Fashion-MNIST in $data (DDP_DATA_DIR)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DDP_DATA_DIR=$data
steps=(--max-steps 1 --threads 1)
names=(cnn_train "torch env://" torchrun ddp-check)
files=(cnn torch torchrun check)

# ranks CMD...: NPROC processes of CMD, each with the contract as --ddp=gloo
# sets it on one node; rank 0's output in $tmp/out, the others' in
# $tmp/out.RANK.  Fails if one does.
ranks() {
	local port r pids=() rc=0
	port=$("$py" "$repo/scripts/free-port") || return 1
	for ((r = 0; r < nproc_; r++)); do
		RANK=$r LOCAL_RANK=$r WORLD_SIZE=$nproc_ LOCAL_WORLD_SIZE=$nproc_ GROUP_RANK=0 NODE_RANK=0 \
			MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DDP_BACKEND=gloo GLOO_SOCKET_IFNAME=lo USE_LIBUV=0 \
			OMP_NUM_THREADS=1 "$@" >"$tmp/out$( ((r)) && echo ".$r")" 2>&1 &
		pids+=($!)
	done
	for r in "${pids[@]}"; do wait "$r" || rc=1; done
	# a failing rank's output, where rank 0's says nothing of it
	((rc == 0)) || for ((r = 1; r < nproc_; r++)); do cat "$tmp/out.$r" >>"$tmp/out"; done
	return $rc
}

# run_variant I ROUND: one run of variant I; prints its seconds, or fails
# with its output in $tmp/out
run_variant() {
	local i=$1 t0 t1 json=$tmp/cnn.json
	rm -f "$json"
	t0=$EPOCHREALTIME
	case $i in
	0) ranks "$cnn" --device cpu "${steps[@]}" --progress lines --log-json "$json" || return 1
	   t1=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["first_step_unix"])' "$json") ;;
	1) ranks "$py" "$repo/bench/torch_cnn.py" --data-dir "$data" "${steps[@]}" || return 1
	   t1=$(awk '$1 == "first_step_unix" { print $2 }' "$tmp/out") ;;
	2) env ${torchrun_env[@]+"${torchrun_env[@]}"} OMP_NUM_THREADS=1 "$py" -m torch.distributed.run --standalone --nproc_per_node "$nproc_" \
		"$repo/bench/torch_cnn.py" --data-dir "$data" "${steps[@]}" >"$tmp/out" 2>&1 || return 1
	   t1=$(awk '$1 == "first_step_unix" { print $2; exit }' "$tmp/out") ;;
	3) ranks "$check" --maxbytes 0 || return 1
	   t1=$EPOCHREALTIME ;;
	esac
	[ -n "$t1" ] || return 1
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# torchrun as users run it; where it fails for want of libuv (Debian's
# PyTorch 2.x), once more with USE_LIBUV=0, which its message suggests
torchrun_env=()
if ! run_variant 2 0 >/dev/null && grep -q 'USE_LIBUV=0' "$tmp/out"; then
	torchrun_env=(USE_LIBUV=0)
fi
declare -A why
startup_runs "$rounds" 2

torch_v=$("$py" -c 'import torch; print(torch.__version__)')
echo "# start-up without Slurm: $nproc_ processes on one machine to the end of the first training step (gradients all-reduced), $rounds runs each, interleaved"
echo "# PyTorch $torch_v, $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), $(date -u +%F)"
startup_rows
echo "# cnn_train, torch env://, ddp-check: started with the contract as --ddp sets it; torchrun: its agent and rendezvous, then its workers${torchrun_env[*]:+ (with ${torchrun_env[*]})}"
echo "# ddp-check: to its verdict (every check and the exact all-reduce, no bandwidth sweep)"
