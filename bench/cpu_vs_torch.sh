#!/bin/bash
# cnn_train against PyTorch on this machine's CPUs, in one run: the same
# model (the PyTorch examples MNIST Net), data (Fashion-MNIST), batch size
# per process, optimizer, thread count and number of steps, on 1 process
# with all cores and on 2 processes x 1 thread (gloo over loopback for
# both).  Prints images/s of each and the ratio.
#
#   bench/cpu_vs_torch.sh                 200 timed steps per configuration
#   STEPS=500 BATCH=64 bench/cpu_vs_torch.sh
#   EPOCHS=2 bench/cpu_vs_torch.sh        whole epochs: test accuracy as well
#   OPTIMIZER=adadelta EPOCHS=2 bench/cpu_vs_torch.sh
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cnn=${CNN_TRAIN:-$repo/build/bin/cnn_train}
py=${PYTHON:-/usr/bin/python3}
steps=${STEPS:-200}
batch=${BATCH:-64}
epochs=${EPOCHS:-}
optimizer=${OPTIMIZER:-sgd}
cores=$(nproc)
[ -x "$cnn" ] || { echo "bench: $cnn not built (run make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "$epochs" ]; then
	cnn_len=(--epochs "$epochs"); torch_len=(--epochs "$epochs")
else
	cnn_len=(--max-steps "$steps"); torch_len=(--max-steps "$steps")
fi

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# launch NPROC THREADS OUTFILE CMD...: NPROC ranks on loopback, rank 0's output kept.
launch() {
	local np=$1 th=$2 out=$3; shift 3
	local port pids=() r rc=0
	port=$(free_port)
	for ((r = np - 1; r >= 0; r--)); do
		if [ "$np" -gt 1 ]; then
			# (what srun --ddp sets; USE_LIBUV=0: PyTorch 2.4 and later
			# built without libuv, Debian 13's, fail env:// without it)
			env OMP_NUM_THREADS="$th" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" USE_LIBUV=0 \
				WORLD_SIZE="$np" RANK="$r" LOCAL_RANK="$r" "$@" >"$out.$r" 2>&1 &
		else
			env OMP_NUM_THREADS="$th" "$@" >"$out.$r" 2>&1 &
		fi
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	if [ "$rc" -ne 0 ]; then
		echo "bench: failed: $*" >&2
		cat "$out".* >&2
		exit 1
	fi
	cp "$out.0" "$out"
}

length="$steps steps"
[ -z "$epochs" ] || length="$epochs epochs"
printf '# cpu_vs_torch: %s, %d cores, batch %d per process, %s, %s, %s\n' \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$cores" "$batch" "$optimizer" \
	"$length" "$(date -u +%Y-%m-%d)"
printf '# torch %s\n' "$("$py" -c 'import torch; print(torch.__version__)')"
printf '%-22s %14s %14s %8s %10s %10s\n' config cnn_train_img/s torch_img/s ratio cnn_acc torch_acc
for cfg in "1 $cores" "2 1"; do
	set -- $cfg
	np=$1 th=$2
	launch "$np" "$th" "$tmp/cnn" "$cnn" --batch-size "$batch" --optimizer "$optimizer" \
		--threads "$th" "${cnn_len[@]}" --progress lines --log-every 100000 --log-json "$tmp/cnn.json"
	launch "$np" "$th" "$tmp/torch" "$py" "$repo/bench/torch_cnn.py" --batch-size "$batch" \
		--optimizer "$optimizer" --threads "$th" "${torch_len[@]}"
	c=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_sec"])' "$tmp/cnn.json")
	ca=$("$py" -c 'import json,sys; a=json.load(open(sys.argv[1]))["test_accuracy"]; print("-" if a is None else f"{a:.4f}")' "$tmp/cnn.json")
	t=$(sed -n 's/^images_per_sec //p' "$tmp/torch")
	ta=$(sed -n 's/^test_accuracy //p' "$tmp/torch")
	printf '%-22s %14.0f %14.0f %7.2fx %10s %10s\n' "${np} proc x ${th} thread" "$c" "$t" \
		"$(awk -v a="$c" -v b="$t" 'BEGIN { print a / b }')" "$ca" "${ta:--}"
done
