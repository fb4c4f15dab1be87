#!/bin/bash
# cnn_train against PyTorch on this machine's CPUs, in one run: the same
# model (the PyTorch examples MNIST Net), data (Fashion-MNIST), batch size
# per process, optimizer, thread count and number of steps, on 1 process
# with all cores and on 2 processes x 1 thread (cnn_train's ranks through
# shared memory, its default on one node, and through gloo over loopback
# as PyTorch's).  REPEATS runs of each program per configuration, taking
# turns to go first; prints each one's median images/s with the lowest and
# highest, the ratio of the medians, cnn_train's 2x1 against its 1x2, and
# every run's images/s.
#
#   bench/cpu_vs_torch.sh                 200 timed steps per run, 3 runs each
#   REPEATS=5 bench/cpu_vs_torch.sh
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
repeats=${REPEATS:-3}
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "bench: REPEATS=$repeats: expected a count of runs" >&2; exit 2; }
cores=$(nproc)
[ -x "$cnn" ] || { echo "bench: $cnn not built (run make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "$epochs" ]; then
	cnn_len=(--epochs "$epochs"); torch_len=(--epochs "$epochs")
else
	cnn_len=(--max-steps "$steps"); torch_len=(--max-steps "$steps")
fi

free_port() { "$py" "$repo/scripts/free-port"; }

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
# the widest vector instructions: "AMD EPYC" alone names VMs of either
isa=$(awk '/^flags/ { print (/ avx512f /) ? "AVX-512" : (/ avx2 /) ? "AVX2" : "no AVX2"; exit }' /proc/cpuinfo)
printf '# cpu_vs_torch: %s (%s), %d cores, batch %d per process, %s, %s, %s, %d runs each, interleaved\n' \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$isa" "$cores" "$batch" "$optimizer" \
	"$length" "$(date -u +%Y-%m-%d)" "$repeats"
printf '# torch %s\n' "$("$py" -c 'import torch; print(torch.__version__)')"
printf '%-18s %15s %15s %11s %15s %7s %8s %8s\n' config cnn_train_img/s lowest..highest torch_img/s \
	lowest..highest ratio cnn_acc torch_acc

# run_cnn NP TH [RUNS [ARGS...]] / run_torch NP TH: one run; appends
# "images/s accuracy" to $tmp/RUNS.runs (cnn) or $tmp/torch.runs
run_cnn() {
	local np=$1 th=$2 runs=${3:-cnn}
	shift 3 2>/dev/null || shift $#
	launch "$np" "$th" "$tmp/cnn" "$cnn" --batch-size "$batch" --optimizer "$optimizer" \
		--threads "$th" "${cnn_len[@]}" --progress lines --log-every 100000 --log-json "$tmp/cnn.json" "$@"
	"$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); a = j["test_accuracy"]
print(j["images_per_sec"], "-" if a is None else f"{a:.4f}")' "$tmp/cnn.json" >>"$tmp/$runs.runs"
}
run_torch() {
	launch "$1" "$2" "$tmp/torch" "$py" "$repo/bench/torch_cnn.py" --batch-size "$batch" \
		--optimizer "$optimizer" --threads "$2" "${torch_len[@]}"
	echo "$(sed -n 's/^images_per_sec //p' "$tmp/torch") $(sed -n 's/^test_accuracy //p' "$tmp/torch" | grep . || echo -)" \
		>>"$tmp/torch.runs"
}
# summary FILE: median, lowest..highest of the first column; the median run's accuracy
summary() { sort -g "$1" | awk '{ v[NR] = $1; a[NR] = $2 } END { m = int((NR + 1) / 2)
	med = NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2
	printf "%.0f %.0f..%.0f %s\n", med, v[1], v[NR], a[m] }'; }

# row LABEL CNN_RUNS: one line of the table against PyTorch's runs
row() {
	read -r c cr ca < <(summary "$tmp/$2.runs")
	read -r t tr ta < <(summary "$tmp/torch.runs")
	printf '%-18s %15s %15s %11s %15s %6.2fx %8s %8s\n' "$1" "$c" "$cr" "$t" "$tr" \
		"$(awk -v a="$c" -v b="$t" 'BEGIN { print a / b }')" "$ca" "$ta"
}

# 1 x cores, then 2 x 1: cnn_train's ranks all-reduce through shared
# memory (its default on one node) and, in the same turns, through gloo
# (--shm-allreduce off), as PyTorch's do
# runs_of NAME: the images/s of each run of a row's program, in run order
runs_of() { awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }' "$tmp/$1.runs"; }

declare -A med
raw=()
for cfg in "1 $cores" "2 1"; do
	set -- $cfg
	np=$1 th=$2
	rm -f "$tmp/cnn.runs" "$tmp/gloo.runs" "$tmp/torch.runs"
	for ((k = 0; k < repeats; k++)); do
		if ((k % 2)); then run_torch "$np" "$th"; run_cnn "$np" "$th" cnn
		else run_cnn "$np" "$th" cnn; run_torch "$np" "$th"; fi
		[ "$np" -eq 1 ] || run_cnn "$np" "$th" gloo --shm-allreduce off
	done
	row "${np} proc x ${th} thread" cnn
	med[$np]=$(summary "$tmp/cnn.runs" | cut -d' ' -f1)
	[ "$np" -eq 1 ] || row "  (gloo, no shm)" gloo
	raw+=("# runs, ${np} proc x ${th} thread: cnn_train $(runs_of cnn)$([ "$np" -eq 1 ] || echo " | gloo $(runs_of gloo)") | torch $(runs_of torch)")
done
printf '# cnn_train 2 proc x 1 thread at %.1f%% of its 1 proc x %d threads\n' \
	"$(awk -v a="${med[2]}" -v b="${med[1]}" 'BEGIN { print 100 * a / b }')" "$cores"
printf '%s\n' "${raw[@]}"
