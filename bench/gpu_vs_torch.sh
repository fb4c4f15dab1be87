#!/bin/bash
# cnn_train --device cuda against PyTorch on the same GPU, in one run: the
# same Net, data (Fashion-MNIST in GPU memory, batches gathered there),
# SGD, batch size and precision, at per-GPU batch sizes 64, 256 and 1024.
# cnn_train runs with its CUDA graph and with --no-graph; PyTorch eager,
# torch.compile of the whole step (forward, backward, optimizer) in each of
# its modes, and a whole-step CUDA graph, each in NCHW and channels_last:
# a PyTorch cell is the best of its column's runs (their medians), each
# run's figure after the table.  Prints
# images/s of each, cnn_train's ratio to eager PyTorch and to PyTorch's
# best, and the TFLOP/s cnn_train achieved against the GPU's peak; after
# the table, per batch size, what cnn_train's default run chose and why
# (its "# GPU:" line: each convolution call timed on cuDNN and on the
# project's kernels, the layout).
#
#   bench/gpu_vs_torch.sh                    300 steps a run, and at least an epoch's
#                                            60,000 images (IMAGES): 938 steps at 64
#                                            (300 steps at 64 are 66 ms of an H200's
#                                            time, where a stall of a few ms is a few
#                                            percent); STEPS=N: N steps at every size
#   EPOCHS=2 bench/gpu_vs_torch.sh           2 whole epochs: test accuracy too
#   BATCHES="64 1024" PRECISION=fp32 bench/gpu_vs_torch.sh   (tf32, fp32 or bf16)
#   DDP_DATA_DIR=/path/to/fashion-mnist      where the IDX files are
#   TORCH_MODES="eager graph"                skip torch.compile (slow to compile)
#   TORCH_COMPILE_MODES="max-autotune"       torch.compile's modes (default: default
#                                            reduce-overhead max-autotune)
#   TORCH_LAYOUTS=nchw                       PyTorch's layouts (default: nchw
#                                            channels_last on a GPU, nchw on the CPU)
#   CNN_ARGS="--conv-layout nhwc"            more cnn_train options (both its runs)
#   CNN_VARIANTS="nhwc:--conv-layout nhwc;s2:--backward-streams 2"
#                                            more cnn_train columns (graph runs), each
#                                            LABEL:OPTIONS on top of CNN_ARGS; the
#                                            ratios then take the fastest cnn column,
#                                            named in a last column, cnn_best
#   SEED=2                                   both programs' seed (initial weights,
#                                            shuffles, dropout; default each's own, 1)
#   SEEDS="1 2 3"                            one run of each column per seed,
#                                            interleaved as REPEATS (their count):
#                                            each cell the median of the seeds' runs;
#                                            with EPOCHS the test accuracy the seeds'
#                                            mean, each seed's after the table (one
#                                            seed's accuracy moves by up to a point)
#   REPEATS=3                                each cell the median of 3 runs, the
#                                            columns' runs interleaved (cnn, its
#                                            variants, PyTorch's modes, again), so
#                                            that a ratio near a target is not one
#                                            run's noise; each column's runs after
#                                            the table
#   DEVICE=cpu                               a dry run of this script on the CPU
#                                            (eager PyTorch only): no GPU figures
# cnn_train's default run and eager PyTorch failing stop the bench (there is
# no table without them); a variant or another PyTorch mode that fails
# prints "failed" in its cell, and after the table its output's last line.
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cnn=${CNN_TRAIN:-$repo/build/bin/cnn_train}
py=${PYTHON:-python3}
steps=${STEPS:-}
images=${IMAGES:-60000}
for v in "STEPS=$steps" "IMAGES=$images"; do
	if ! [[ ${v#*=} =~ ^([1-9][0-9]*)?$ ]] || [ "$v" = IMAGES= ]; then
		echo "bench: $v: expected a whole number, 1 or more" >&2
		exit 2
	fi
done
epochs=${EPOCHS:-}
batches=${BATCHES:-64 256 1024}
precision=${PRECISION:-tf32}
read -r -a cnn_args <<<"${CNN_ARGS:-}"
labels=() vopts=()
IFS=';' read -r -a variants <<<"${CNN_VARIANTS:-}"
for v in ${variants[@]+"${variants[@]}"}; do
	if [[ $v =~ ^([A-Za-z0-9_]+):(.*)$ ]]; then
		labels+=("${BASH_REMATCH[1]}") vopts+=("${BASH_REMATCH[2]}")
	else
		echo "bench: CNN_VARIANTS entry '$v': expected LABEL:OPTIONS (a label of letters, digits and _)" >&2
		exit 2
	fi
done
seed=${SEED:-}
if [ -n "$seed" ] && ! [[ $seed =~ ^[0-9]+$ ]]; then
	echo "bench: SEED=$seed: expected a whole number" >&2
	exit 2
fi
repeats=${REPEATS:-1}
if ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
	echo "bench: REPEATS=$repeats: expected a whole number of runs, 1 or more" >&2
	exit 2
fi
read -r -a seeds <<<"${SEEDS:-}"
if [ -n "${SEEDS+x}" ]; then
	for v in ${seeds[@]+"${seeds[@]}"}; do
		[[ $v =~ ^[0-9]+$ ]] || { echo "bench: SEEDS=$SEEDS: '$v' is not a whole number" >&2; exit 2; }
	done
	if [ ${#seeds[@]} -eq 0 ]; then
		echo "bench: SEEDS is empty: expected whole numbers, a run of each column for each" >&2
		exit 2
	fi
	if [ -n "$seed" ]; then
		echo "bench: SEED=$seed and SEEDS=$SEEDS: one or the other" >&2
		exit 2
	fi
	if [ -n "${REPEATS:-}" ] && [ "$REPEATS" != ${#seeds[@]} ]; then
		echo "bench: REPEATS=$REPEATS and SEEDS=$SEEDS: a run per seed (leave REPEATS out)" >&2
		exit 2
	fi
	repeats=${#seeds[@]}
fi
device=${DEVICE:-cuda}
case $device in
cuda) modes=${TORCH_MODES:-eager compile graph} layouts=${TORCH_LAYOUTS:-nchw channels_last} ;;
cpu) modes=${TORCH_MODES:-eager} layouts=${TORCH_LAYOUTS:-nchw} ;;
*) echo "bench: DEVICE=$device: expected cuda or cpu" >&2; exit 2 ;;
esac
cmodes=${TORCH_COMPILE_MODES:-default reduce-overhead max-autotune}
for v in $modes; do
	case $v in eager | compile | graph) ;; *) echo "bench: TORCH_MODES: '$v': expected eager, compile or graph" >&2; exit 2 ;; esac
done
for v in $layouts; do
	case $v in nchw | channels_last) ;; *) echo "bench: TORCH_LAYOUTS: '$v': expected nchw or channels_last" >&2; exit 2 ;; esac
done
for v in $cmodes; do
	case $v in default | reduce-overhead | max-autotune) ;;
	*) echo "bench: TORCH_COMPILE_MODES: '$v': expected default, reduce-overhead or max-autotune" >&2; exit 2 ;;
	esac
done
if [ -z "$modes" ] || [ -z "$layouts" ] || [ -z "$cmodes" ]; then
	echo "bench: TORCH_MODES, TORCH_LAYOUTS and TORCH_COMPILE_MODES each name one or more" >&2
	exit 2
fi
data=${DDP_DATA_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$cnn" ] || { echo "bench: $cnn not built (run make)" >&2; exit 2; }
if [ "$device" = cuda ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "bench: no GPU here (nvidia-smi -L fails): run on a GPU machine (DEVICE=cpu: a dry run)" >&2
	exit 2
fi
if [ "$device" = cpu ] && [ "$modes" != eager ]; then
	echo "bench: DEVICE=cpu runs TORCH_MODES=eager only (compile and graph need CUDA)" >&2
	exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# steps_for B: the run's steps at batch size B (STEPS, or 300 and at least
# IMAGES images)
steps_for() {
	local n=$(((images + $1 - 1) / $1))
	if [ -n "$steps" ]; then echo "$steps"; elif [ "$n" -gt 300 ]; then echo "$n"; else echo 300; fi
}
# len_for B [SEED]: the programs' options for the run's length at batch
# size B, and its seed (SEED, else SEED's)
len_for() {
	if [ -n "$epochs" ]; then
		len=(--epochs "$epochs")
	else
		len=(--max-steps "$(steps_for "$1")")
	fi
	local sd=${2:-$seed}
	[ -z "$sd" ] || len+=(--seed "$sd")
}
# mean_acc ACC...: the mean of test accuracies to 4 decimals, "-" where one
# is not a number (not evaluated, or its run failed)
mean_acc() {
	local v
	for v in "$@"; do [[ $v =~ ^[0-9.]+$ ]] || { echo -; return; }; done
	printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.4f\n", s / NR }'
}

# Training FLOPs per image of the Net at 28x28: forward, backward-filter
# (as many) and backward-data (all but conv1's).
flops=$("$py" - <<'EOF'
c1 = 2 * 26 * 26 * 32 * 9 * 1
c2 = 2 * 24 * 24 * 64 * 32 * 9
f1 = 2 * 9216 * 128
f2 = 2 * 128 * 10
fwd = c1 + c2 + f1 + f2
print(3 * fwd - c1)
EOF
)
if [ "$device" = cuda ]; then
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else
	gpu="CPU (DEVICE=cpu: a dry run, no GPU figures)"
fi
# Dense peak of the math cnn_train uses (tf32, bf16: tensor cores; fp32:
# CUDA cores), from NVIDIA's data sheets.
case "$gpu:$precision" in
*H100*SXM*:bf16 | *H100*HBM3*:bf16 | *H200*:bf16) peak=989.4 ;;
*H100*PCIe*:bf16) peak=756.5 ;;
*A100*:bf16) peak=312.0 ;;
*H100*SXM*:tf32 | *H100*HBM3*:tf32 | *H200*:tf32) peak=494.7 ;;
*H100*SXM*:fp32 | *H100*HBM3*:fp32 | *H200*:fp32) peak=66.9 ;;
*H100*PCIe*:tf32) peak=378.0 ;;
*H100*PCIe*:fp32) peak=51.2 ;;
*A100*:tf32) peak=156.0 ;;
*A100*:fp32) peak=19.5 ;;
*) peak= ;;
esac

# run_cnn OUT ARGS...: cnn_train's images/s and test accuracy ("-" when
# not evaluated) in OUT.res, its output in OUT; 1 when it failed
run_cnn() {
	local out=$1; shift
	"$cnn" --device "$device" --batch-size "$b" --precision "$precision" --data-dir "$data" \
		"${len[@]}" --progress lines --log-every 1000000 --log-json "$out.json" \
		${cnn_args[@]+"${cnn_args[@]}"} "$@" >"$out" 2>&1 || return 1
	"$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); a=j["test_accuracy"];
print(j["images_per_sec"], "-" if a is None else f"{a:.4f}")' "$out.json" >"$out.res"
}
# specs MODE: the PyTorch runs of MODE's column, each MODE/LAYOUT, a
# compile's MODE compile:ITS_MODE
specs() {
	local l c
	for l in $layouts; do
		if [ "$1" = compile ]; then
			for c in $cmodes; do echo "compile:$c/$l"; done
		else
			echo "$1/$l"
		fi
	done
}
# run_name SPEC: a run's name within its column: the layout, after a
# compile's mode (max-autotune/nchw)
run_name() {
	case $1 in compile:*) echo "${1#compile:}" ;; *) echo "${1#*/}" ;; esac
}
# label MODE SPEC: how a note names a run of MODE's column
label() {
	if [ "$(specs "$1" | wc -l)" -eq 1 ]; then echo "torch_$1"; else echo "torch_$1 $(run_name "$2")"; fi
}
# run_torch OUT SPEC: the same for PyTorch as SPEC says (specs)
run_torch() {
	local mode=${2%/*} extra=()
	case $mode in compile:*) extra+=(--compile-mode "${mode#compile:}") mode=compile ;; esac
	[ "${2#*/}" = nchw ] || extra+=(--channels-last)
	"$py" "$repo/bench/torch_cnn_gpu.py" --mode "$mode" ${extra[@]+"${extra[@]}"} --batch-size "$b" \
		--precision "$precision" --device "$device" --data-dir "$data" "${len[@]}" >"$1" 2>&1 || return 1
	echo "$(sed -n 's/^images_per_sec //p' "$1") $(sed -n 's/^test_accuracy //p' "$1")" >"$1.res"
}
fatal() { # WHAT OUT
	echo "bench: $1 failed:" >&2
	cat "$2" >&2
	exit 1
}
# failed WHAT OUT: a note for after the table, with cnn_train's last error
# line (not its usage text), else OUT's last line (a Python exception's)
failed() {
	local why
	why=$(grep '^cnn_train: ' "$2" | tail -n 1 || true)
	[ -n "$why" ] || why=$(grep -v '^#' "$2" | grep . | tail -n 1 || true)
	notes+=("#   batch $b: $1 failed: $why")
}
# median VALUE...: the middle value (the mean of the two middle ones for an
# even count), or "failed" when any is
median() {
	local v
	for v in "$@"; do [ "$v" != failed ] || { echo failed; return; }; done
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END {
		if (NR % 2) print a[(NR + 1) / 2]; else printf "%.1f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# runs VALUE...: " v1 v2 ...", images/s to the unit, "failed" as it is
runs() {
	local v
	for v in "$@"; do
		if [ "$v" = failed ]; then printf ' failed'; else printf ' %.0f' "$v"; fi
	done
}
# kept FILE B R X: what cnn_train's default run R at batch B (X images/s)
# kept, from its log: the step's replay times as its last auto timed them
# and each cuDNN call's algorithm; nothing for a log with no # GPU: line.
# Runs whose medians differ are told apart by these (an H200 replayed the
# same "all cuDNN" step at 64 in 0.223 ms in one run, 0.262 in the next).
kept() {
	local algos step item='conv[12] [a-z -]+ [A-Z0-9_?]+ \([^)]*\)'
	grep -q '^# GPU: ' "$1" || return 0
	algos=$(sed -n -E "s/^# GPU: .*, batch $2 cuDNN: ($item(, $item)*).*/\1/p" "$1")
	step=$(sed -n -E "s/^# conv layout auto \(batch $2\): //p" "$1")
	[ -n "$step" ] || step=$(sed -n -E "s/^# backward streams auto \(batch $2\): //p" "$1")
	printf '#   batch %s run %s (%.0f images/s): %s; cuDNN: %s' "$2" "$3" "$4" "${step:-no step timed}" \
		"${algos:-none}"
}
# cell VALUE: images/s, or "failed" as it is
cell() {
	if [ "$1" = failed ]; then printf ' %10s' failed; else printf ' %10.0f' "$1"; fi
}

# torch_runs: what a PyTorch cell is the best of, where a column has more
# than one run
torch_runs() {
	local m n=0
	for m in $modes; do [ "$(specs "$m" | wc -l)" -eq 1 ] || n=1; done
	[ "$n" = 1 ] || return 0
	printf '; a torch cell the best of its runs: layouts %s' "$layouts"
	case " $modes " in *" compile "*) printf ', torch.compile modes %s' "$cmodes" ;; esac
}

length="${steps:-300} steps${steps:+ at every batch size}"
[ -n "$steps" ] || length+=" and at least $images images a run"
[ -z "$epochs" ] || length="$epochs epochs"
printf '# gpu_vs_torch: %s, %s, %s, %s\n' "$gpu" "$precision" "$length" "$(date -u +%Y-%m-%d)"
printf '# torch %s; training FLOPs per image %s; peak %s TFLOP/s%s\n' \
	"$("$py" -c 'import torch; print(torch.__version__ + ", CUDA", torch.version.cuda)')" \
	"$flops" "${peak:-unknown}" \
	"${CNN_ARGS:+; cnn_train $CNN_ARGS}${CNN_VARIANTS:+; variants $CNN_VARIANTS}$(torch_runs)${seed:+; seed $seed}$(
		if [ ${#seeds[@]} -gt 0 ]; then
			echo "; seeds ${seeds[*]}: each cell the median of the seeds' interleaved runs${epochs:+, the accuracy their mean}"
		elif [ "$repeats" -gt 1 ]; then
			echo "; each cell the median of $repeats interleaved runs"
		fi)"
printf '%6s %10s %10s' batch cnn cnn_nograph
for l in ${labels[@]+"${labels[@]}"}; do printf ' %10s' "cnn_$l"; done
for m in $modes; do printf ' %10s' "torch_$m"; done
printf ' %9s %9s %8s %7s' vs_eager vs_best TFLOP/s of_peak
[ -z "$epochs" ] || printf ' %8s %8s' cnn_acc torch_acc
[ ${#labels[@]} -eq 0 ] || printf ' %s' cnn_best
printf '\n'
notes=()
for b in $batches; do
	# each column's images/s, one a repeat; "failed" where a run failed;
	# with SEEDS each column's accuracies too, one a seed
	cs=() cns=() vrs=() cacc='' vaccs=() kruns=() caccs=() vaccl=()
	declare -A t=() tacc=() trs=() taccl=() srs=() saccl=() sacc=()
	for ((r = 0; r < repeats; r++)); do
		len_for "$b" ${seeds[$r]+"${seeds[$r]}"}
		run_cnn "$tmp/cnn" || fatal cnn_train "$tmp/cnn"
		read -r x xacc <"$tmp/cnn.res"
		cs+=("$x") caccs+=("$xacc")
		[ "$repeats" -eq 1 ] || kruns+=("$(kept "$tmp/cnn" "$b" $((r + 1)) "$x")")
		[ "$r" -gt 0 ] || cacc=$xacc
		if run_cnn "$tmp/cnn_ng" --no-graph; then
			read -r x _ <"$tmp/cnn_ng.res"
			cns+=("$x")
		else
			cns+=(failed)
			[ "$r" -gt 0 ] || failed cnn_nograph "$tmp/cnn_ng"
		fi
		for i in ${labels[@]+"${!labels[@]}"}; do
			read -r -a vo <<<"${vopts[$i]}"
			if ! run_cnn "$tmp/cnn_v$i" ${vo[@]+"${vo[@]}"}; then
				vrs[i]="${vrs[i]:-} failed" vaccl[i]="${vaccl[i]:-} -"
				[ "$r" -gt 0 ] || failed "cnn_${labels[$i]}" "$tmp/cnn_v$i"
				continue
			fi
			read -r x xacc <"$tmp/cnn_v$i.res"
			vrs[i]="${vrs[i]:-} $x" vaccl[i]="${vaccl[i]:-} $xacc"
			[ "$r" -gt 0 ] || vaccs[i]=$xacc
			# --backward-streams auto's times, both ways, --conv2
			# auto's, --conv-layout auto's and --pdl's (the last repeat's)
			[ "$r" -lt $((repeats - 1)) ] ||
				notes+=("$(sed -n -e "s/^# backward streams auto (batch [0-9]*): /#   batch $b cnn_${labels[$i]}: backward streams /p" \
					-e "s/^# conv2 auto (batch [0-9]*): /#   batch $b cnn_${labels[$i]}: conv2 auto: /p" \
					-e "s/^# conv layout auto (batch [0-9]*): /#   batch $b cnn_${labels[$i]}: conv layout auto: /p" \
					-e "s/^# programmatic launch \([a-z]*\) (batch [0-9]*): /#   batch $b cnn_${labels[$i]}: programmatic launch \1: /p" \
					"$tmp/cnn_v$i")")
		done
		for m in $modes; do
			ok=0
			for sp in $(specs "$m"); do
				if run_torch "$tmp/torch" "$sp"; then
					read -r x xacc <"$tmp/torch.res"
					srs[$sp]="${srs[$sp]:-} $x" saccl[$sp]="${saccl[$sp]:-} $xacc" ok=1
					[ "$r" -gt 0 ] || sacc[$sp]=$xacc
				else
					srs[$sp]="${srs[$sp]:-} failed" saccl[$sp]="${saccl[$sp]:-} -"
					[ "$r" -gt 0 ] || { sacc[$sp]=-; failed "$(label "$m" "$sp")" "$tmp/torch"; }
				fi
			done
			# eager PyTorch is the table's base: not one of its runs did
			[ "$ok" = 1 ] || [ "$m" != eager ] || fatal "torch ($m)" "$tmp/torch"
		done
	done
	# each PyTorch column: its best run (the highest median of a spec's
	# repeats), each of its runs' medians in a note when it has several
	for m in $modes; do
		bs='' bv=0 sl=''
		for sp in $(specs "$m"); do
			# shellcheck disable=SC2086
			v=$(median ${srs[$sp]})
			sl+="${sl:+, }$(run_name "$sp") $(cell "$v" | tr -d ' ')"
			[ -n "$bs" ] || bs=$sp
			if [ "$v" != failed ] && awk -v a="$v" -v b="$bv" 'BEGIN { exit !(a > b) }'; then
				bs=$sp bv=$v
			fi
		done
		trs[$m]=${srs[$bs]} taccl[$m]=${saccl[$bs]} tacc[$m]=${sacc[$bs]}
		[ "$(specs "$m" | wc -l)" -eq 1 ] ||
			notes+=("#   batch $b torch_$m: $sl; the cell: $(run_name "$bs")")
	done
	c=$(median "${cs[@]}") cn=$(median "${cns[@]}")
	if [ ${#seeds[@]} -gt 0 ]; then
		# the accuracies: each column's mean over the seeds
		cacc=$(mean_acc "${caccs[@]}")
		for i in ${labels[@]+"${!labels[@]}"}; do
			# shellcheck disable=SC2086
			vaccs[i]=$(mean_acc ${vaccl[$i]})
		done
		for m in $modes; do
			# shellcheck disable=SC2086
			tacc[$m]=$(mean_acc ${taccl[$m]})
		done
	fi
	# the variants' columns; the ratios take the fastest cnn column
	vals=() pick=cnn c0=$c
	for i in ${labels[@]+"${!labels[@]}"}; do
		# shellcheck disable=SC2086
		v=$(median ${vrs[$i]})
		vals+=("$v")
		if [ "$v" != failed ] && awk -v a="$v" -v b="$c" 'BEGIN { exit !(a > b) }'; then
			c=$v cacc=${vaccs[$i]} pick=cnn_${labels[$i]}
		fi
	done
	for m in $modes; do
		# shellcheck disable=SC2086
		t[$m]=$(median ${trs[$m]})
	done
	best=0
	for m in $modes; do
		[ "${t[$m]}" = failed ] ||
			best=$(awk -v a="$best" -v b="${t[$m]}" 'BEGIN { print (b > a ? b : a) }')
	done
	eager=${t[eager]:-0}
	printf '%6d %10.0f' "$b" "$c0"
	cell "$cn"
	for v in ${vals[@]+"${vals[@]}"}; do cell "$v"; done
	for m in $modes; do cell "${t[$m]}"; done
	tf=$(awk -v i="$c" -v f="$flops" 'BEGIN { printf "%.2f", i * f / 1e12 }')
	printf ' %8.2fx %8.2fx %8s %7s' \
		"$(awk -v a="$c" -v b="$eager" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
		"$(awk -v a="$c" -v b="$best" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$tf" \
		"$([ -n "$peak" ] && awk -v a="$tf" -v p="$peak" 'BEGIN { printf "%.1f%%", 100 * a / p }' || echo -)"
	[ -z "$epochs" ] || printf ' %8s %8s' "$cacc" "${tacc[eager]:--}"
	[ ${#labels[@]} -eq 0 ] || printf ' %s' "$pick"
	printf '\n'
	# REPEATS: each column's runs in the order they ran, for after the
	# table (a median near a target says nothing of the spread)
	if [ "$repeats" -gt 1 ]; then
		rl="#   batch $b runs: cnn$(runs "${cs[@]}"), cnn_nograph$(runs "${cns[@]}")"
		for i in ${labels[@]+"${!labels[@]}"}; do
			# shellcheck disable=SC2086
			rl+=", cnn_${labels[$i]}$(runs ${vrs[$i]})"
		done
		for m in $modes; do
			# shellcheck disable=SC2086
			rl+=", torch_$m$(runs ${trs[$m]})"
		done
		notes+=("$rl" ${kruns[@]+"${kruns[@]}"})
	fi
	# SEEDS with EPOCHS: each column's accuracy by seed, and their mean
	if [ ${#seeds[@]} -gt 0 ] && [ -n "$epochs" ]; then
		al="#   batch $b test accuracy, seeds ${seeds[*]}: cnn ${caccs[*]} (mean $(mean_acc "${caccs[@]}"))"
		for i in ${labels[@]+"${!labels[@]}"}; do
			# shellcheck disable=SC2086
			al+=", cnn_${labels[$i]}${vaccl[$i]} (mean $(mean_acc ${vaccl[$i]}))"
		done
		for m in $modes; do
			# shellcheck disable=SC2086
			al+=", torch_$m${taccl[$m]} (mean $(mean_acc ${taccl[$m]}))"
		done
		notes+=("$al")
	fi
	unset t tacc trs
	# what cnn_train's default run chose at this batch size and why (its
	# "# GPU:" line: the convolutions' calls timed both ways) and what its
	# step's CUDA graph holds, for after the table
	notes+=("$(sed -n -e "s/^# GPU: /#   batch $b: /p" \
		-e "s/^# CUDA graph of a training step (batch [0-9]*): /#   batch $b graph: /p" \
		-e "s/^# backward streams auto (batch [0-9]*): /#   batch $b: backward streams /p" \
		-e "s/^# conv2 auto (batch [0-9]*): /#   batch $b: conv2 auto: /p" \
		-e "s/^# conv layout auto (batch [0-9]*): /#   batch $b: conv layout auto: /p" \
		-e "s/^# programmatic launch \([a-z]*\) (batch [0-9]*): /#   batch $b: programmatic launch \1: /p" "$tmp/cnn")")
done
for n in ${notes[@]+"${notes[@]}"}; do [ -z "$n" ] || printf '%s\n' "$n"; done
