#!/usr/bin/env bats
# The bench scripts run end to end, briefly, and the figures they print are
# consistent with each other: a ratio is its own columns' quotient, TFLOP/s
# follow from images/s.  No timing is asserted; these runs are too short to
# mean anything, they only keep the scripts from rotting between the runs
# that docs/benchmarks.md records.  gpu_vs_torch.sh runs as DEVICE=cpu (its
# dry run: the same plumbing, cnn_train and eager PyTorch on the CPU).
# bats file_tags=bench

load helpers
plain_data
# each script runs both programs; PyTorch's import alone takes seconds here
BATS_TEST_TIMEOUT=180

PY=/usr/bin/python3

setup_file() {
	make -s -C "$REPO/bench" >/dev/null
}

# quotient_ok GOT A B TOL [HALF]: GOT is A / B within TOL (its printed
# decimals), A and B positive; HALF: A and B as printed, rounded to within
# HALF each (0.0005 for 3 decimals), which widens TOL by what that moves
# A / B (HALF / B + A HALF / B^2: two medians of 0.25 and 0.33 ms, printed
# to 0.001, move their quotient by up to 0.0027)
quotient_ok() {
	awk -v g="$1" -v a="$2" -v b="$3" -v e="$4" -v h="${5:-0}" 'BEGIN { d = a / b - g
		if (b > 0) e += h / b + a * h / (b * b)
		if (!(a > 0 && b > 0) || d > e || -d > e) { printf "%s is not %s / %s\n", g, a, b; exit 1 } }'
}

# ratio_ok GOT A B: GOT ("1.46x" or "1.46") is A / B to its 2 printed decimals
# (A and B themselves rounded to whole images/s)
ratio_ok() {
	awk -v g="${1%x}" -v a="$2" -v b="$3" 'BEGIN {
		# (mawk divides by zero without an error: a word taken for a number)
		if (!(a > 0 && b > 0)) { printf "columns %s and %s: expected positive numbers\n", a, b; exit 1 }
		r = a / b; e = 0.006 + r * (0.5 / a + 0.5 / b)
		if (g - r > e || r - g > e) { printf "ratio %s, columns give %.4f\n", g, r; exit 1 } }'
}

@test "gpu_vs_torch.sh DEVICE=cpu: a row per batch size, its ratios and TFLOP/s from its columns; then each batch size's # GPU: and graph lines" {
	# On a GPU cnn_train prints a "# GPU:" line (each convolution call's
	# choice and times) and its step graph's census, which follow the table
	# per batch size, with --conv-layout auto's and --pdl's times; here a wrapper around
	# the real program adds them, naming the batch size it got.
	cat >"$BATS_TEST_TMPDIR/cnn_train" <<-EOF
	#!/bin/bash
	"$REPO/build/bin/cnn_train" "\$@" || exit
	while [ \$# -gt 0 ]; do
		[ "\$1" = --batch-size ] && echo "# GPU: as given --batch-size \$2" &&
			echo "# CUDA graph of a training step (batch \$2): \$2 nodes: as given" &&
			echo "# conv layout auto (batch \$2): NHWC kept; as given" &&
			echo "# programmatic launch auto (batch \$2): on kept; as given"
		shift
	done
	EOF
	chmod +x "$BATS_TEST_TMPDIR/cnn_train"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY BATCHES="32 64" STEPS=15 CNN_TRAIN="$BATS_TEST_TMPDIR/cnn_train" \
		"$REPO/bench/gpu_vs_torch.sh"
	assert_success
	assert_line --index 0 --partial "# gpu_vs_torch: CPU (DEVICE=cpu: a dry run, no GPU figures), tf32, 15 steps"
	assert_line --index 2 --regexp '^ batch +cnn cnn_nograph +torch_eager +vs_eager +vs_best +TFLOP/s of_peak$'
	flops=$(sed -n 's/.*training FLOPs per image \([0-9]*\);.*/\1/p' <<<"${lines[1]}")
	assert_equal "$flops" 71565312
	for i in 3 4; do
		read -r b c cn te ve vb tf pk <<<"${lines[$i]}"
		assert_equal "$b" $((32 * (i - 2)))
		[ "$c" -gt 0 ]
		[ "$cn" -gt 0 ]
		[ "$te" -gt 0 ]
		ratio_ok "$ve" "$c" "$te"
		assert_equal "$vb" "$ve"   # eager is the only PyTorch mode: the best
		awk -v t="$tf" -v c="$c" -v f="$flops" 'BEGIN { exit !((t - c * f / 1e12)^2 < 0.0051^2) }'
		assert_equal "$pk" -        # no peak for a CPU
	done
	assert_line --index 5 "#   batch 32: as given --batch-size 32"
	assert_line --index 6 "#   batch 32 graph: 32 nodes: as given"
	assert_line --index 7 "#   batch 32: conv layout auto: NHWC kept; as given"
	assert_line --index 8 "#   batch 32: programmatic launch auto: on kept; as given"
	assert_line --index 9 "#   batch 64: as given --batch-size 64"
	assert_line --index 10 "#   batch 64 graph: 64 nodes: as given"
	assert_line --index 11 "#   batch 64: conv layout auto: NHWC kept; as given"
	assert_line --index 12 "#   batch 64: programmatic launch auto: on kept; as given"
	assert_equal "${#lines[@]}" 13
}

@test "gpu_vs_torch.sh: bf16, CNN_VARIANTS and CNN_ARGS reach the programs; a CPU dry run refuses the CUDA-only modes" {
	# CNN_VARIANTS: a column per variant, the ratios from the fastest cnn
	# column, named last.  A device call is ten minutes: a variant that
	# fails (bad) prints failed in its cell and its error after the table,
	# and the other columns stand.
	run --separate-stderr env DEVICE=cpu PYTHON=$PY BATCHES=32 STEPS=12 PRECISION=bf16 \
		CNN_VARIANTS="t2:--threads 2;bad:--conv-layout chwn;nd:--no-dropout" "$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_success
	assert_line --index 0 --partial ", bf16, 12 steps"
	assert_line --index 1 --partial "; variants t2:--threads 2;bad:--conv-layout chwn;nd:--no-dropout"
	assert_line --index 2 --regexp '^ batch +cnn cnn_nograph +cnn_t2 +cnn_bad +cnn_nd +torch_eager +vs_eager +vs_best +TFLOP/s of_peak cnn_best$'
	read -r b c cn v1 vbad v2 te ve vb tf pk best <<<"${lines[3]}"
	assert_equal "$b" 32
	assert_equal "$vbad" failed
	assert_line --index 4 "#   batch 32: cnn_bad failed: cnn_train: --conv-layout=chwn: expected nchw, nhwc or auto"
	assert_equal "${#lines[@]}" 5
	# the column named is the fastest of the three graph columns (to their
	# printed rounding; cnn_nograph is not a variant)
	declare -A col=([cnn]=$c [cnn_t2]=$v1 [cnn_nd]=$v2)
	top=$(printf '%s\n' "$c" "$v1" "$v2" | sort -nr | head -1)
	assert_equal "${col[$best]}" "$top"
	ratio_ok "$ve" "$top" "$te"
	assert_equal "$vb" "$ve"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY CNN_VARIANTS="--threads 2" "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: CNN_VARIANTS entry '--threads 2': expected LABEL:OPTIONS (a label of letters, digits and _)"

	# CNN_ARGS reaches cnn_train (an option it refuses fails the bench, saying why)
	run --separate-stderr env DEVICE=cpu PYTHON=$PY BATCHES=32 STEPS=2 CNN_ARGS="--conv-layout chwn" "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 1
	assert_line --index 1 --partial "; cnn_train --conv-layout chwn"
	[[ "$stderr" == *"bench: cnn_train failed:"*"--conv-layout=chwn: expected nchw, nhwc or auto"* ]]

	run --separate-stderr env DEVICE=cpu PYTHON=$PY TORCH_MODES="eager graph" "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: DEVICE=cpu runs TORCH_MODES=eager only (compile and graph need CUDA)"
	run --separate-stderr env DEVICE=tpu "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: DEVICE=tpu: expected cuda or cpu"
	run --separate-stderr "$PY" "$REPO/bench/torch_cnn_gpu.py" --device cpu --mode graph
	assert_equal "$status" 2
	[[ "$stderr" == *"--mode graph needs CUDA: --device cpu runs --mode eager only"* ]]
}

# REPEATS=N: each column's N runs interleaved (cnn, cnn --no-graph, PyTorch,
# again), each cell their median.  Stand-ins report known images/s: the
# real cnn_train runs, then its --log-json gets the next of a list.
@test "gpu_vs_torch.sh REPEATS=3: each cell the median of its column's three interleaved runs; SEED reaches both programs" {
	local d="$BATS_TEST_TMPDIR"
	printf '%s\n' 300 50 100 60 200 40 >"$d/cnn.seq"
	printf '%s\n' 20 10 40 >"$d/torch.seq"
	cat >"$d/cnn_train" <<-EOF
	#!/bin/bash
	"$REPO/build/bin/cnn_train" "\$@" || exit
	while [ \$# -gt 0 ]; do [ "\$1" = --log-json ] && j=\$2; shift; done
	v=\$(head -1 "$d/cnn.seq"); sed -i 1d "$d/cnn.seq"
	echo "\$v" >>"$d/cnn.order"
	$PY -c 'import json, sys; f = sys.argv[1]; j = json.load(open(f)); j["images_per_sec"] = float(sys.argv[2]); json.dump(j, open(f, "w"))' "\$j" "\$v"
	# what a GPU's run prints of its choices, its replay time the run's
	echo "# GPU: as given, batch 32 cuDNN: conv2 forward IMPLICIT_GEMM (tensor ops), conv2 backward-data ALGO_1 (tensor ops, converting), batch 16 cuDNN: conv2 forward FFT (FMA), batch 32 fc2 fused 0.017 ms (cuBLAS 0.022), CUDA graph"
	echo "# conv layout auto (batch 32): NCHW kept; a replay of the step took 0.\$v ms in NCHW"
	EOF
	cat >"$d/python3" <<-EOF
	#!/bin/bash
	case "\$1" in
	*torch_cnn_gpu.py)
		echo "\$*" >>"$d/torch.args"
		v=\$(head -1 "$d/torch.seq"); sed -i 1d "$d/torch.seq"
		echo "\$v" >>"$d/cnn.order"
		echo "images_per_sec \$v"; echo "test_accuracy -"; exit 0 ;;
	esac
	exec $PY "\$@"
	EOF
	chmod +x "$d/cnn_train" "$d/python3"
	run --separate-stderr env DEVICE=cpu PYTHON="$d/python3" BATCHES=32 STEPS=2 REPEATS=3 SEED=7 \
		CNN_TRAIN="$d/cnn_train" "$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_success
	assert_line --index 1 --partial "; seed 7; each cell the median of 3 interleaved runs"
	# SEED reaches PyTorch's script (and cnn_train: the stand-in ran it)
	assert_equal "$(grep -c -- '--seed 7' "$d/torch.args")" 3
	read -r b c cn te ve vb _ <<<"${lines[3]}"
	assert_equal "$b $c $cn $te $ve $vb" "32 200 50 20 10.00x 10.00x"
	# interleaved: cnn, cnn --no-graph, PyTorch, three times
	assert_equal "$(tr '\n' ' ' <"$d/cnn.order")" "300 50 20 100 60 10 200 40 40 "
	# each column's runs after the table, in the order they ran; then what
	# each of the default's runs kept: its step's time, cuDNN's algorithms
	assert_line --index 4 "#   batch 32 runs: cnn 300 100 200, cnn_nograph 50 60 40, torch_eager 20 10 40"
	assert_line --index 5 "#   batch 32 run 1 (300 images/s): NCHW kept; a replay of the step took 0.300 ms in NCHW; cuDNN: conv2 forward IMPLICIT_GEMM (tensor ops), conv2 backward-data ALGO_1 (tensor ops, converting)"
	assert_line --index 6 --partial "#   batch 32 run 2 (100 images/s): NCHW kept; a replay of the step took 0.100 ms in NCHW; cuDNN: conv2 forward"
	assert_line --index 7 --partial "#   batch 32 run 3 (200 images/s): NCHW kept; a replay of the step took 0.200 ms"
	assert_line --index 8 "#   batch 32: as given, batch 32 cuDNN: conv2 forward IMPLICIT_GEMM (tensor ops), conv2 backward-data ALGO_1 (tensor ops, converting), batch 16 cuDNN: conv2 forward FFT (FMA), batch 32 fc2 fused 0.017 ms (cuBLAS 0.022), CUDA graph"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY REPEATS=0 "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: REPEATS=0: expected a whole number of runs, 1 or more"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY SEED=x "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: SEED=x: expected a whole number"
}

# SEEDS="S1 S2 ...": a run of each column per seed, interleaved as REPEATS;
# with EPOCHS the accuracy cells are the seeds' mean, each seed's after the
# table (one seed's 2-epoch accuracy moves by up to a point: a single pair
# of runs cannot say "the same accuracy").  Stand-ins: images/s and the
# accuracy from the seed they were given.
@test "gpu_vs_torch.sh SEEDS: a run per seed of each column, the seed reaching both programs; the accuracy the seeds' mean, each seed's after the table" {
	local d="$BATS_TEST_TMPDIR"
	cat >"$d/cnn_train" <<-EOF
	#!/bin/bash
	echo "\$*" >>"$d/cnn.args"
	while [ \$# -gt 0 ]; do
		case \$1 in --log-json) j=\$2 ;; --seed) s=\$2 ;; esac
		shift
	done
	printf '{"images_per_sec": %d, "test_accuracy": 0.80%02d}\\n' \$((100 * s)) "\$s" >"\$j"
	EOF
	cat >"$d/python3" <<-EOF
	#!/bin/bash
	case "\$1" in
	*torch_cnn_gpu.py)
		echo "\$*" >>"$d/torch.args"
		s=\$(sed -n 's/.*--seed \([0-9]*\).*/\1/p' <<<"\$*")
		echo "images_per_sec \$((10 * s))"; printf 'test_accuracy 0.90%02d\n' "\$s"; exit 0 ;;
	esac
	exec $PY "\$@"
	EOF
	chmod +x "$d/cnn_train" "$d/python3"
	run --separate-stderr env DEVICE=cpu PYTHON="$d/python3" BATCHES=32 EPOCHS=1 SEEDS="3 5" \
		CNN_TRAIN="$d/cnn_train" "$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_success
	assert_line --index 1 --partial "; seeds 3 5: each cell the median of the seeds' interleaved runs, the accuracy their mean"
	read -r b c cn te ve _ _ _ ca ta <<<"${lines[3]}"
	assert_equal "$b $c $cn $te $ve $ca $ta" "32 400 400 40 10.00x 0.8004 0.9004"
	assert_line --index 4 "#   batch 32 runs: cnn 300 500, cnn_nograph 300 500, torch_eager 30 50"
	assert_line "#   batch 32 test accuracy, seeds 3 5: cnn 0.8003 0.8005 (mean 0.8004), torch_eager 0.9003 0.9005 (mean 0.9004)"
	# each seed in turn: cnn_train, its --no-graph run, PyTorch
	assert_equal "$(sed 's/.*--seed \([0-9]*\).*/\1/' "$d/cnn.args" | tr '\n' ' ')" "3 3 5 5 "
	assert_equal "$(sed 's/.*--seed \([0-9]*\).*/\1/' "$d/torch.args" | tr '\n' ' ')" "3 5 "
	grep -q -- '--epochs 1' "$d/torch.args"
	# SEEDS is the runs' seeds: not beside SEED, nor another REPEATS
	run --separate-stderr env DEVICE=cpu PYTHON=$PY SEEDS="1 2" SEED=4 "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: SEED=4 and SEEDS=1 2: one or the other"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY SEEDS="1 2" REPEATS=3 "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: REPEATS=3 and SEEDS=1 2: a run per seed (leave REPEATS out)"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY SEEDS="1 x" "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: SEEDS=1 x: 'x' is not a whole number"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY SEEDS= "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: SEEDS is empty: expected whole numbers, a run of each column for each"
}

# The runs' length: 300 steps and at least IMAGES images (an epoch of
# Fashion-MNIST by default: a short timed window is a stall's noise), both
# programs alike; STEPS=N is N at every batch size.  Stand-ins record the
# options they were given.
@test "gpu_vs_torch.sh: 300 steps a run and at least IMAGES images, STEPS at every batch size" {
	local d="$BATS_TEST_TMPDIR"
	cat >"$d/cnn_train" <<-EOF
	#!/bin/bash
	echo "\$*" >>"$d/cnn.args"
	while [ \$# -gt 0 ]; do [ "\$1" = --log-json ] && j=\$2; shift; done
	echo '{"images_per_sec": 100.0, "test_accuracy": null}' >"\$j"
	EOF
	cat >"$d/python3" <<-EOF
	#!/bin/bash
	case "\$1" in
	*torch_cnn_gpu.py)
		echo "\$*" >>"$d/torch.args"
		echo "images_per_sec 10"; echo "test_accuracy -"; exit 0 ;;
	esac
	exec $PY "\$@"
	EOF
	chmod +x "$d/cnn_train" "$d/python3"
	run --separate-stderr env DEVICE=cpu PYTHON="$d/python3" BATCHES="32 64" IMAGES=12800 \
		CNN_TRAIN="$d/cnn_train" "$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_success
	assert_line --index 0 --partial ", tf32, 300 steps and at least 12800 images a run, "
	# 12800 images: 400 steps at 32; at 64, 300 (200 would be fewer)
	assert_equal "$(grep -c -- '--batch-size 32 .*--max-steps 400 ' "$d/cnn.args")" 2
	assert_equal "$(grep -c -- '--batch-size 64 .*--max-steps 300 ' "$d/cnn.args")" 2
	assert_equal "$(grep -c -- '--batch-size 32 .*--max-steps 400$' "$d/torch.args")" 1
	assert_equal "$(grep -c -- '--batch-size 64 .*--max-steps 300$' "$d/torch.args")" 1
	rm "$d/cnn.args" "$d/torch.args"
	run --separate-stderr env DEVICE=cpu PYTHON="$d/python3" BATCHES="32 64" STEPS=7 \
		CNN_TRAIN="$d/cnn_train" "$REPO/bench/gpu_vs_torch.sh"
	assert_success
	assert_line --index 0 --partial ", tf32, 7 steps at every batch size, "
	assert_equal "$(grep -c -- '--max-steps 7 ' "$d/cnn.args")" 4
	assert_equal "$(grep -c -- '--max-steps 7$' "$d/torch.args")" 2
	run --separate-stderr env DEVICE=cpu PYTHON=$PY IMAGES=0 "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: IMAGES=0: expected a whole number, 1 or more"
	run --separate-stderr env DEVICE=cpu PYTHON=$PY STEPS=x "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: STEPS=x: expected a whole number, 1 or more"
}

# On a GPU each PyTorch column runs in NCHW and channels_last, compile in
# each of torch.compile's modes: its cell the best of its runs' medians,
# each run's figure after the table, a failing run named.  Stand-ins: a
# GPU (nvidia-smi), cnn_train, and PyTorch's images/s from its options.
@test "gpu_vs_torch.sh on a GPU: PyTorch in NCHW and channels_last, torch.compile in its three modes; each cell the best of its runs" {
	local d="$BATS_TEST_TMPDIR"
	cat >"$d/nvidia-smi" <<-'EOF'
	#!/bin/bash
	case "$*" in -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;; *) echo "NVIDIA H200" ;; esac
	EOF
	cat >"$d/cnn_train" <<-EOF
	#!/bin/bash
	while [ \$# -gt 0 ]; do [ "\$1" = --log-json ] && j=\$2; shift; done
	echo '{"images_per_sec": 820.0, "test_accuracy": null}' >"\$j"
	EOF
	cat >"$d/python3" <<-EOF
	#!/bin/bash
	case "\$1" in
	*torch_cnn_gpu.py)
		echo "\$*" >>"$d/torch.args"
		case "\$*" in
		*max-autotune*--channels-last*) echo "RuntimeError: autotune boom" >&2; exit 1 ;;
		*--mode\ eager*) v=100 ;;
		*--mode\ graph*) v=300 ;;
		*--compile-mode\ default*) v=200 ;;
		*--compile-mode\ reduce-overhead*) v=400 ;;
		*--compile-mode\ max-autotune*) v=350 ;;
		esac
		case "\$*" in *--channels-last*) v=\$((v + 10)) ;; esac
		echo "images_per_sec \$v"; echo "test_accuracy -"; exit 0 ;;
	esac
	exec $PY "\$@"
	EOF
	chmod +x "$d/nvidia-smi" "$d/cnn_train" "$d/python3"
	run --separate-stderr env PATH="$d:$PATH" PYTHON="$d/python3" BATCHES=32 STEPS=2 CNN_TRAIN="$d/cnn_train" \
		"$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_success
	assert_line --index 0 --partial "# gpu_vs_torch: NVIDIA H200, tf32, 2 steps"
	assert_line --index 1 --partial "; a torch cell the best of its runs: layouts nchw channels_last, torch.compile modes default reduce-overhead max-autotune"
	assert_line --index 2 --regexp '^ batch +cnn cnn_nograph +torch_eager +torch_compile +torch_graph +vs_eager +vs_best +TFLOP/s of_peak$'
	read -r b c cn te tc tg ve vb _ <<<"${lines[3]}"
	assert_equal "$b $c $cn $te $tc $tg $ve $vb" "32 820 820 110 410 310 7.45x 2.00x"
	assert_line --index 4 "#   batch 32: torch_compile max-autotune/channels_last failed: RuntimeError: autotune boom"
	assert_line --index 5 "#   batch 32 torch_eager: nchw 100, channels_last 110; the cell: channels_last"
	assert_line --index 6 "#   batch 32 torch_compile: default/nchw 200, reduce-overhead/nchw 400, max-autotune/nchw 350, default/channels_last 210, reduce-overhead/channels_last 410, max-autotune/channels_last failed; the cell: reduce-overhead/channels_last"
	assert_line --index 7 "#   batch 32 torch_graph: nchw 300, channels_last 310; the cell: channels_last"
	# each run's options reached PyTorch's script: 10 runs
	assert_equal "$(wc -l <"$d/torch.args")" 10
	assert_equal "$(grep -c -- '--mode compile --compile-mode reduce-overhead --channels-last --batch-size 32 ' "$d/torch.args")" 1
	assert_equal "$(grep -c -- '--mode graph --batch-size 32 ' "$d/torch.args")" 1
	# TORCH_LAYOUTS and TORCH_COMPILE_MODES narrow the runs; a word they do not know is refused
	rm "$d/torch.args"
	run --separate-stderr env PATH="$d:$PATH" PYTHON="$d/python3" BATCHES=32 STEPS=2 CNN_TRAIN="$d/cnn_train" \
		TORCH_MODES="eager compile" TORCH_LAYOUTS=nchw TORCH_COMPILE_MODES=max-autotune "$REPO/bench/gpu_vs_torch.sh"
	assert_success
	read -r b c cn te tc _ <<<"${lines[3]}"
	assert_equal "$te $tc" "100 350"
	assert_equal "$(wc -l <"$d/torch.args")" 2
	run --separate-stderr env PATH="$d:$PATH" TORCH_LAYOUTS=nhwc "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: TORCH_LAYOUTS: 'nhwc': expected nchw or channels_last"
	run --separate-stderr env PATH="$d:$PATH" TORCH_COMPILE_MODES=fast "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	assert_equal "$stderr" "bench: TORCH_COMPILE_MODES: 'fast': expected default, reduce-overhead or max-autotune"
}

# The default run and eager PyTorch are the table's reference: without
# them the bench stops (a failing variant does not: above).
@test "gpu_vs_torch.sh: eager PyTorch failing stops the bench, with its error" {
	cat >"$BATS_TEST_TMPDIR/python3" <<-EOF
	#!/bin/bash
	case "\$1" in *torch_cnn_gpu.py) echo "RuntimeError: no torch today" >&2; exit 1 ;; esac
	exec $PY "\$@"
	EOF
	chmod +x "$BATS_TEST_TMPDIR/python3"
	run --separate-stderr env DEVICE=cpu PYTHON="$BATS_TEST_TMPDIR/python3" BATCHES=32 STEPS=2 \
		"$REPO/bench/gpu_vs_torch.sh"
	echo "$stderr"
	assert_equal "$status" 1
	# (what the bench's own Python calls print before it, if anything, is
	# PyTorch's: once, in a make check beside the cluster's tests, something
	# did, and this test failed without saying what)
	[[ "$stderr" == *"bench: torch (eager) failed:"*"RuntimeError: no torch today" ]]
}

@test "ncu_kernels.py: ncu's CSV (units, thousands separators, other lines) per kernel and step, largest first" {
	local csv="$BATS_TEST_TMPDIR/ncu.csv"
	cat >"$csv" <<-'CSV'
	==PROF== Connected to process 1234 (/g/bin/cnn_train)
	# GPU: NVIDIA H100 80GB HBM3 (sm_90), TF32, NCHW, CUDA graph
	"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
	"0","1234","cnn_train","h","void (anonymous namespace)::bias_relu<float>(float *, const float *, int, int, unsigned long)","1","13","(256, 1, 1)","(5408, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","4.96"
	"1","1234","cnn_train","h","sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc","1","13","(128, 1, 1)","(16, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","1,012.50"
	"2","1234","cnn_train","h","void (anonymous namespace)::bias_relu<float>(float *, const float *, int, int, unsigned long)","1","13","(256, 1, 1)","(5408, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","5040"
	"3","1234","cnn_train","h","void cudnn::nchwToNhwcKernel<float, (cudnnKernelDataType_t)0>(const float *, float *)","1","13","(256, 1, 1)","(12, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","0.002"
	CSV
	run --separate-stderr "$PY" "$REPO/bench/ncu_kernels.py" --steps 2 --top 2 --width 40 "$csv"
	assert_success
	assert_line --index 0 --regexp '^kernel +us/step +calls +share$'
	assert_line --index 1 --regexp '^sm90_xmma_fprop_implicit_gemm_tf32f32\.\.\. +506\.2 +0\.5 +98\.8%$'
	assert_line --index 2 --regexp '^bias_relu<float> +5\.0 +1\.0 +1\.0%$'
	assert_line --index 3 --regexp '^\(1 more\) +1\.0 +0\.5 +0\.2%$'
	assert_line --index 4 --regexp '^total +512\.2 +2\.0 +100\.0%$'
	# a capture with nothing in it, and a unit it does not know, say so
	grep -v '^"' "$csv" >"$BATS_TEST_TMPDIR/empty.csv"
	run --separate-stderr "$PY" "$REPO/bench/ncu_kernels.py" "$BATS_TEST_TMPDIR/empty.csv"
	assert_failure
	[[ "$stderr" == *"holds no CSV rows (did ncu capture any kernel?"* ]]
	sed 's/"usecond","4.96"/"cycle","4.96"/' "$csv" >"$BATS_TEST_TMPDIR/cycles.csv"
	run --separate-stderr "$PY" "$REPO/bench/ncu_kernels.py" "$BATS_TEST_TMPDIR/cycles.csv"
	assert_failure
	[[ "$stderr" == *"unit 'cycle' of gpu__time_duration.sum: expected one of"* ]]
}

# `.gpu/run.sh kernels`: more metrics than time, one row each per launch
# (ncu's ID), a value "n/a" where a metric has none; the columns follow
# the metrics the capture holds, in the script's order, whatever ncu's.
@test "ncu_kernels.py: each kernel's speed of light, percentages weighted by launch time, only the metrics the capture holds" {
	local csv="$BATS_TEST_TMPDIR/sol.csv" h='"1234","cnn_train","h"' k1 k2
	k1='"void (anonymous namespace)::conv3_igemm<float, false, 64, true, false, false>(const float *, const float *)","1","13","(256, 1, 1)","(288, 1, 1)","0","9.0","Command line profiler metrics"'
	k2='"void (anonymous namespace)::sgd_step<float>(float *, float *)","1","13","(256, 1, 1)","(4688, 1, 1)","0","9.0","Command line profiler metrics"'
	{
		echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
		echo "\"0\",$h,$k1,\"launch__registers_per_thread\",\"register/thread\",\"128\""
		echo "\"0\",$h,$k1,\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"60.00\""
		echo "\"0\",$h,$k1,\"gpu__time_duration.sum\",\"usecond\",\"30.00\""
		echo "\"0\",$h,$k1,\"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active\",\"%\",\"40.00\""
		echo "\"0\",$h,$k1,\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum\",\"\",\"1,200\""
		echo "\"1\",$h,$k2,\"gpu__time_duration.sum\",\"usecond\",\"10.00\""
		echo "\"1\",$h,$k2,\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"20.00\""
		echo "\"1\",$h,$k2,\"launch__registers_per_thread\",\"register/thread\",\"32\""
		echo "\"1\",$h,$k2,\"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active\",\"%\",\"n/a\""
		echo "\"1\",$h,$k2,\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum\",\"\",\"0\""
		echo "\"2\",$h,$k1,\"gpu__time_duration.sum\",\"usecond\",\"10.00\""
		echo "\"2\",$h,$k1,\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"20.00\""
		echo "\"2\",$h,$k1,\"launch__registers_per_thread\",\"register/thread\",\"126\""
		echo "\"2\",$h,$k1,\"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active\",\"%\",\"80.00\""
		echo "\"2\",$h,$k1,\"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum\",\"\",\"400\""
	} >"$csv"
	run --separate-stderr "$PY" "$REPO/bench/ncu_kernels.py" --width 50 "$csv"
	echo "$stderr"
	assert_success
	# conv3_igemm: 40 us in 2 launches; sm% (60*30 + 20*10) / 40 = 50, tc%
	# (40*30 + 80*10) / 40 = 50, regs the larger, conflicts 800 a launch;
	# total sm% (60*30 + 20*10 + 20*10) / 50 = 44, tc% over the launches with one
	assert_line --index 0 --regexp '^kernel +us/step +calls +share +sm% +tc% +regs +bc_ld$'
	assert_line --index 1 --regexp '^conv3_igemm<float, false, 64, true, false, false> +40\.0 +2\.0 +80\.0% +50\.0 +50\.0 +128 +800$'
	assert_line --index 2 --regexp '^sgd_step<float> +10\.0 +1\.0 +20\.0% +20\.0 +- +32 +0$'
	assert_line --index 3 --regexp '^total +50\.0 +3\.0 +100\.0% +44\.0 +50\.0 +128 +533$'
	# the list run.sh asks ncu for: time first, then each column's names
	run "$PY" "$REPO/bench/ncu_kernels.py" --metrics
	assert_success
	assert_line --index 0 gpu__time_duration.sum
	assert_line sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
	assert_line sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
	assert_line launch__registers_per_thread
}

@test "gpu_vs_torch.sh and h2d_bind.sh without a GPU: each says so (2: refused, 0: skipped)" {
	if nvidia-smi -L >/dev/null 2>&1; then
		skip "this machine has a GPU: the real runs are the benchmarks themselves"
	fi
	run --separate-stderr "$REPO/bench/gpu_vs_torch.sh"
	assert_equal "$status" 2
	[[ "$stderr" == "bench: no GPU here (nvidia-smi -L fails)"* ]]
	run --separate-stderr "$REPO/bench/h2d_bind.sh"
	assert_success
	assert_equal "$stderr" "h2d_bind.sh: SKIP: no NVIDIA GPU on this machine"
}

@test "h2d_bind where hwloc sees no GPU: plugin and far exit 4 naming why, a bad mode 2" {
	if nvidia-smi -L >/dev/null 2>&1; then
		skip "this machine has a GPU: bench/h2d_bind.sh measures it"
	fi
	[ -x "$REPO/build/bench/h2d_bind" ] || skip "build/bench/h2d_bind not built: no CUDA headers here"
	for mode in plugin far; do
		run --separate-stderr "$REPO/build/bench/h2d_bind" --mode=$mode
		assert_equal "$status" 4
		[[ "$stderr" == "h2d_bind: GRES GPU 0 is not a PCI device of this machine's hwloc topology"* ]]
	done
	run --separate-stderr "$REPO/build/bench/h2d_bind" --mode=sideways
	assert_equal "$status" 2
}

@test "cpu_vs_torch.sh REPEATS=2: both configurations and 2x1 through gloo, each median within its runs, each ratio its medians' quotient, 2x1 against 1x2, every run listed; a bad REPEATS refused" {
	run env REPEATS=0 "$REPO/bench/cpu_vs_torch.sh"
	assert_failure 2
	assert_output "bench: REPEATS=0: expected a count of runs"
	run --separate-stderr env PYTHON=$PY STEPS=12 REPEATS=2 "$REPO/bench/cpu_vs_torch.sh"
	assert_success
	assert_line --index 0 --regexp "^# cpu_vs_torch: .* \((AVX-512|AVX2|no AVX2)\), $(nproc) cores, batch 64 per process, sgd, 12 steps"
	assert_line --index 0 --partial ", 2 runs each, interleaved"
	assert_line --index 2 --regexp '^config +cnn_train_img/s +lowest\.\.highest +torch_img/s +lowest\.\.highest +ratio +cnn_acc +torch_acc$'
	local i f k
	for i in 3 4; do
		# 1 proc x 2 thread  MED LO..HI  MED LO..HI  RATIOx  ACC ACC
		read -r -a f <<<"${lines[$i]}"
		assert_equal "${f[*]:0:5}" "$([ "$i" = 3 ] && echo "1 proc x $(nproc) thread" || echo "2 proc x 1 thread")"
		for k in 5 7; do
			awk -v m="${f[$k]}" -v r="${f[$((k + 1))]}" 'BEGIN { split(r, x, /\.\./)
				exit !(m > 0 && x[1] + 0 <= m + 0 && m + 0 <= x[2] + 0) }' ||
				fail "median ${f[$k]} is not within its runs ${f[$((k + 1))]}"
		done
		ratio_ok "${f[9]}" "${f[5]}" "${f[7]}"
		assert_equal "${f[*]:10}" "- -"
	done
	# 2x1 through gloo (--shm-allreduce off) against the same PyTorch runs
	read -r -a g <<<"${lines[5]}"
	assert_equal "${g[*]:0:3}" "(gloo, no shm)"
	awk -v m="${g[3]}" -v r="${g[4]}" 'BEGIN { split(r, x, /\.\./); exit !(m > 0 && x[1] + 0 <= m + 0 && m + 0 <= x[2] + 0) }' ||
		fail "median ${g[3]} is not within its runs ${g[4]}"
	assert_equal "${g[5]} ${g[6]}" "${f[7]} ${f[8]}"
	ratio_ok "${g[7]}" "${g[3]}" "${g[5]}"
	# cnn_train's 2x1 against its 1x2: the two rows' medians
	read -r -a one <<<"${lines[3]}"
	assert_line --index 6 "# cnn_train 2 proc x 1 thread at $(awk -v a="${f[5]}" -v b="${one[5]}" 'BEGIN { printf "%.1f", 100 * a / b }')% of its 1 proc x $(nproc) threads"
	# every run's images/s: two a program, their median the row's
	assert_line --index 7 --regexp "^# runs, 1 proc x $(nproc) thread: cnn_train [0-9.]+ [0-9.]+ \| torch [0-9.]+ [0-9.]+$"
	assert_line --index 8 --regexp '^# runs, 2 proc x 1 thread: cnn_train [0-9.]+ [0-9.]+ \| gloo [0-9.]+ [0-9.]+ \| torch [0-9.]+ [0-9.]+$'
	read -r -a r <<<"${lines[8]}"
	assert_equal "$(awk -v a="${r[8]}" -v b="${r[9]}" 'BEGIN { printf "%.0f", (a + b) / 2 }')" "${f[5]}"
	assert_equal "$(awk -v a="${r[16]}" -v b="${r[17]}" 'BEGIN { printf "%.0f", (a + b) / 2 }')" "${f[7]}"
}

@test "rdzv_scale.sh: every rank of both stores completes, the ratio is the columns'" {
	run --separate-stderr env PYTHON=$PY WORLDS="8 32" "$REPO/bench/rdzv_scale.sh"
	assert_success
	assert_line --regexp '^ranks +ddpenv_last_s +torch_last_s +ratio +ddpenv_median_s$'
	for w in 8 32; do
		row=$(printf '%s\n' "${lines[@]}" | awk -v w="$w" '$1 == w')
		read -r n d t r m <<<"$row"
		assert_equal "$n" "$w"
		awk -v d="$d" -v t="$t" -v r="${r%x}" 'BEGIN {
			q = t / d; e = 0.06 + q * (0.0005 / d + 0.0005 / t)
			exit !(d > 0 && t > 0 && (r - q)^2 <= e^2) }'
	done
}

@test "resolve_scale.sh: one name lookup per resolution by name, none from NodeAddr, at every size" {
	run --separate-stderr env REPEAT=20 "$REPO/bench/resolve_scale.sh"
	echo "$stderr"
	assert_success
	rows=$(printf '%s\n' "${lines[@]}" | awk '$2 ~ /^[0-9]+$/ && ($3 == "name" || $3 == "nodeaddr")')
	[ "$(wc -l <<<"$rows")" -ge 5 ]
	while read -r nodes tasks how us lookups head _ addr rank; do
		[ "$how" = name ] && assert_equal "$lookups" 1.00
		[ "$how" = nodeaddr ] && assert_equal "$lookups" 0.00
		assert_equal "$addr" 10.231.254.11
		assert_equal "$rank" "(RANK $((tasks - 1)))"
	done <<<"$rows"
}

@test "launch_cost.sh ROUNDS=2 HOOK_STEPS=3: plain, --ddp and --ddp-bind=none, each ratio its medians' quotient, each paired median inside its 95% interval, the verdict on 2 ms the interval's; the plugin's time per hook and per node from slurmd's logs; the running slurmd with the environment asked for; a bad ROUNDS refused" {
	[ "$(id -u)" = 0 ] || skip "the test cluster needs root"
	run env ROUNDS=x "$REPO/bench/launch_cost.sh"
	assert_failure 2
	assert_output "bench: ROUNDS=x: expected a count of pairs"
	# a cluster of its own (its own run folder: the next free namespaces
	# and network beside another cluster)
	run --separate-stderr env ROUNDS=2 HOOK_STEPS=3 DDP_CLUSTER_DIR="$BATS_TEST_TMPDIR/cluster" \
		DDP_CLUSTER_SLURMD_ENV="HWLOC_PLUGINS_BLACKLIST=hwloc_gl,hwloc_opencl DDP_BENCH_MARK=1" "$REPO/bench/launch_cost.sh"
	assert_success
	# the running slurmd has the environment asked for
	assert_line "# slurmd's environment has: HWLOC_PLUGINS_BLACKLIST=hwloc_gl,hwloc_opencl DDP_BENCH_MARK=1"
	assert_line --regexp '^# --ddp launch cost: srun -N2 --ntasks-per-node=2 true, 2 pairs per variant, interleaved$'
	assert_line --regexp '^plain +[0-9.]+ +- +- +- +1\.00$'
	local v line med diff lo hi want arg
	med=$(awk '$1 == "plain" { print $2 }' <<<"$output")
	for v in ddp ddp-nobind; do
		line=$(grep "^$v " <<<"$output")
		[[ "$line" =~ ^$v\ +([0-9.]+)\ +(-?[0-9.]+)\ +(-?[0-9.]+)\.\.(-?[0-9.]+)\ +\((-?[0-9.]+)\.\.(-?[0-9.]+)\)\ +([0-9.]+)$ ]] ||
			fail "row '$line'"
		quotient_ok "${BASH_REMATCH[7]}" "${BASH_REMATCH[1]}" "$med" 0.002 ||
			fail "ratio of '$line' is not its median over plain's $med"
		diff=${BASH_REMATCH[2]} lo=${BASH_REMATCH[3]} hi=${BASH_REMATCH[4]}
		# 2 pairs: the interval is the whole range, the quartiles' here
		assert_equal "$lo..$hi" "${BASH_REMATCH[5]}..${BASH_REMATCH[6]}"
		awk -v l="$lo" -v m="$diff" -v h="$hi" 'BEGIN { exit !(l <= m && m <= h) }' ||
			fail "row '$line': the median difference outside its interval"
		# the verdict the interval gives against 2 ms
		want=$(awk -v l="$lo" -v h="$hi" 'BEGIN { print (h < 2) ? "under 2 ms" : (l > 2) ? "above 2 ms" : "not resolved at 2 ms" }')
		arg=--ddp=gloo
		[ "$v" = ddp ] || arg="--ddp=gloo --ddp-bind=none"
		assert_line --regexp "^# $arg: what it adds to a launch, by the interval: $want"
	done
	# 3 steps on 2 nodes, each hook timed in slurmstepd
	assert_line "# the plugin's time in slurmstepd per node and step, 6 node-steps (SlurmdDebug=verbose), ms:"
	# each hook's wall time and its thread's CPU time: q1 <= median <= q3
	# for both, and no CPU time above its wall time's (a hook's CPU time
	# is its thread's, within its wall time); its page faults, waits and
	# preemptions counts, the path's at least each hook's (each
	# node-step's sum is, so its median)
	local faults=() waits=() preempts=() i
	for v in post_opt user_init "task_init (slowest task)" "the step's path"; do
		line=$(grep -F "$v " <<<"$output")
		[[ "$line" =~ \ ([0-9.]+)\ +([0-9.]+)\ +([0-9.]+)\ +([0-9.]+)\ +([0-9.]+)\ +([0-9.]+)\ +([0-9]+)\ +([0-9]+)\ +([0-9]+)$ ]] || fail "row '$line'"
		awk -v m="${BASH_REMATCH[1]}" -v a="${BASH_REMATCH[2]}" -v b="${BASH_REMATCH[3]}" \
			-v cm="${BASH_REMATCH[4]}" -v ca="${BASH_REMATCH[5]}" -v cb="${BASH_REMATCH[6]}" \
			'BEGIN { exit !(a > 0 && a <= m && m <= b && ca > 0 && ca <= cm && cm <= cb && cb <= b + 0.001) }' ||
			fail "row '$line': expected 0 < q1 <= median <= q3 in each, the CPU's q3 at most the wall time's"
		faults+=("${BASH_REMATCH[7]}") waits+=("${BASH_REMATCH[8]}") preempts+=("${BASH_REMATCH[9]}")
	done
	for i in 0 1 2; do
		[ "${faults[$i]}" -le "${faults[3]}" ] || fail "a hook's median page faults ${faults[$i]} above the step's path's ${faults[3]}"
		[ "${waits[$i]}" -le "${waits[3]}" ] || fail "a hook's median waits ${waits[$i]} above the step's path's ${waits[3]}"
		[ "${preempts[$i]}" -le "${preempts[3]}" ] || fail "a hook's median preemptions ${preempts[$i]} above the step's path's ${preempts[3]}"
	done
	# post_opt, as root before the tasks exist, waits for nothing: the
	# head's lookup it starts is answered on glibc's thread
	assert_equal "${waits[0]}" 0
	# a task's child writes into memory it shares with slurmstepd: it faults
	[ "${faults[2]}" -gt 0 ] || fail "task_init's median page faults 0"
	# the node's CPU time, every task's task_init in it: at least the
	# step's path's (each node-step's is, so their medians are)
	line=$(grep "^the node, all its tasks " <<<"$output")
	[[ "$line" =~ ^the\ node,\ all\ its\ tasks\ +-\ +-\ +-\ +([0-9.]+)\ +([0-9.]+)\ +([0-9.]+)\ +-\ +-\ +-$ ]] || fail "row '$line'"
	awk -v m="${BASH_REMATCH[1]}" -v q1="${BASH_REMATCH[2]}" -v q3="${BASH_REMATCH[3]}" \
		-v p="$(awk '/^the step.s path / { print $7 }' <<<"$output")" 'BEGIN { exit !(q1 <= m && m <= q3 && m >= p) }' ||
		fail "row '$line': expected q1 <= median <= q3, the median at least the step's path's CPU"
	run env HOOK_STEPS=x ROUNDS=1 DDP_CLUSTER_DIR="$BATS_TEST_TMPDIR/cluster" "$REPO/bench/launch_cost.sh"
	assert_failure 2
	assert_output --partial "bench: HOOK_STEPS=x: expected a count of steps"
	# the cluster is gone
	[ ! -s "$BATS_TEST_TMPDIR/cluster/net" ]
}

@test "launch_cost.sh NODES=1 NOBIND=0: the step on one node of the two, --ddp with binding only, the hooks' times from that node's slurmstepd only; a bad NODES or NOBIND refused" {
	[ "$(id -u)" = 0 ] || skip "the test cluster needs root"
	run env NODES=3 "$REPO/bench/launch_cost.sh"
	assert_failure 2
	assert_output "bench: NODES=3: expected 1 or 2 (the test cluster's nodes)"
	run env NOBIND=no "$REPO/bench/launch_cost.sh"
	assert_failure 2
	assert_output "bench: NOBIND=no: expected 1 (--ddp-bind=none measured too) or 0 (not)"
	run --separate-stderr env NODES=1 NOBIND=0 ROUNDS=1 HOOK_STEPS=2 DDP_CLUSTER_DIR="$BATS_TEST_TMPDIR/cluster" \
		"$REPO/bench/launch_cost.sh"
	assert_success
	assert_line --regexp '^# --ddp launch cost: srun -N1 --ntasks-per-node=2 true, 1 pairs per variant, interleaved$'
	assert_line --regexp '^ddp +[0-9.]+ +-?[0-9.]+ +'
	assert_line --regexp '^# --ddp=gloo: what it adds to a launch, by the interval: '
	# no --ddp-bind=none: neither its row nor its verdict
	refute_line --partial 'ddp-nobind'
	refute_line --partial 'ddp-bind=none'
	# 2 steps on 1 node: one node-step each
	assert_line "# the plugin's time in slurmstepd per node and step, 2 node-steps (SlurmdDebug=verbose), ms:"
	# the steps ran on node1 only: its slurmstepd timed the hooks, node2's none
	grep -q 'ddp: task_init took ' "$BATS_TEST_TMPDIR/cluster/log/slurmd.node1.log"
	run grep -c 'ddp: .* took ' "$BATS_TEST_TMPDIR/cluster/log/slurmd.node2.log"
	assert_output 0
	[ ! -s "$BATS_TEST_TMPDIR/cluster/net" ]
}

@test "launch_cost.sh INSTALLED=1: plain srun with the plugin listed and --ddp=gloo, each paired with plain srun on no plugin listed; a bad INSTALLED refused" {
	[ "$(id -u)" = 0 ] || skip "the test cluster needs root"
	run env INSTALLED=yes "$REPO/bench/launch_cost.sh"
	assert_failure 2
	assert_output "bench: INSTALLED=yes: expected 0 or 1"
	run --separate-stderr env INSTALLED=1 ROUNDS=2 HOOK_STEPS=0 DDP_CLUSTER_DIR="$BATS_TEST_TMPDIR/cluster" \
		"$REPO/bench/launch_cost.sh"
	assert_success
	assert_line "# INSTALLED=1: each variant against plain srun, no plugin listed (plugstack.conf swapped before each launch)"
	assert_line --regexp '^no-plugin +[0-9.]+ +- +- +- +1\.00$'
	local v line med
	med=$(awk '$1 == "no-plugin" { print $2 }' <<<"$output")
	for v in installed ddp; do
		line=$(grep "^$v " <<<"$output")
		[[ "$line" =~ ^$v\ +([0-9.]+)\ +(-?[0-9.]+)\ +(-?[0-9.]+)\.\.(-?[0-9.]+)\ +\((-?[0-9.]+)\.\.(-?[0-9.]+)\)\ +([0-9.]+)$ ]] ||
			fail "row '$line'"
		quotient_ok "${BASH_REMATCH[7]}" "${BASH_REMATCH[1]}" "$med" 0.002 ||
			fail "ratio of '$line' is not its median over no-plugin's $med"
	done
	refute_line --partial 'ddp-nobind'
	assert_line --regexp '^# the plugin listed, plain srun: what it adds to a launch, by the interval: '
	assert_line --regexp '^# the plugin listed, --ddp=gloo: what it adds to a launch, by the interval: '
	[ ! -s "$BATS_TEST_TMPDIR/cluster/net" ]
}

# startup_rows V...: $output's cnn_train row (ratio 1.00) and a row for
# each variant V, its ratio its median over cnn_train's; only torchrun may
# say instead why it fails here
startup_rows() {
	local v line base
	base=$(awk '$1 == "cnn_train" { print $2 }' <<<"$output")
	assert_line --regexp '^cnn_train +[0-9.]+ +[0-9.]+\.\.[0-9.]+ +1\.00$'
	for v in "$@"; do
		line=$(grep "^$v " <<<"$output")
		if [[ "$line" =~ ^$v\ +-\ +fails\ here:\ (.+)$ ]]; then
			assert_equal "$v" torchrun
			[[ "${BASH_REMATCH[1]}" =~ [A-Za-z] ]]
			continue
		fi
		[[ "$line" =~ ^$v\ +([0-9.]+)\ +([0-9.]+)\.\.([0-9.]+)\ +([0-9.]+)$ ]] || fail "row '$line'"
		quotient_ok "${BASH_REMATCH[4]}" "${BASH_REMATCH[1]}" "$base" 0.006 ||
			fail "ratio of '$line' is not its median over cnn_train's $base"
	done
}

@test "startup.sh ROUNDS=1: cnn_train, PyTorch under --ddp, torchrun (or why it fails) and ddp-check, each ratio its median over cnn_train's; a bad ROUNDS refused" {
	[ "$(id -u)" = 0 ] || skip "the test cluster needs root"
	run env ROUNDS=1x "$REPO/bench/startup.sh"
	assert_failure 2
	assert_output "bench: ROUNDS=1x: expected a count of rounds"
	run --separate-stderr env ROUNDS=1 DDP_CLUSTER_DIR="$BATS_TEST_TMPDIR/cluster" "$REPO/bench/startup.sh"
	echo "$output" "$stderr"
	assert_success
	assert_line --regexp '^# start-up: srun -N2 --ntasks-per-node=1 to the end of the first training step \(gradients all-reduced\), 1 runs each, interleaved$'
	startup_rows "torch --ddp" torchrun ddp-check
	# the cluster is gone
	[ ! -s "$BATS_TEST_TMPDIR/cluster/net" ]
}

@test "startup_local.sh ROUNDS=1: cnn_train, PyTorch env:// and ddp-check with the contract set, torchrun (or why it fails), each ratio its median over cnn_train's; bad ROUNDS and NPROC refused" {
	run env ROUNDS=0 "$REPO/bench/startup_local.sh"
	assert_failure 2
	assert_output "bench: ROUNDS=0: expected a count of rounds"
	run env NPROC=x "$REPO/bench/startup_local.sh"
	assert_failure 2
	assert_output "bench: NPROC=x: expected a count of processes, 1 to 99"
	run env DDP_DATA_DIR="$BATS_TEST_TMPDIR" "$REPO/bench/startup_local.sh"
	assert_failure 2
	assert_output "bench: no Fashion-MNIST in $BATS_TEST_TMPDIR (DDP_DATA_DIR)"
	run --separate-stderr env ROUNDS=1 PYTHON="$PY" "$REPO/bench/startup_local.sh"
	echo "$output" "$stderr"
	assert_success
	assert_line --regexp '^# start-up without Slurm: 2 processes on one machine to the end of the first training step \(gradients all-reduced\), 1 runs each, interleaved$'
	startup_rows "torch env://" torchrun ddp-check
}

@test "startup_local.sh: a rank that fails fails the bench, its output shown" {
	local d=$BATS_TEST_TMPDIR/bin
	mkdir -p "$d"
	# cnn_train's rank 1 dies before the rendezvous; rank 0 waits 5 s for it
	printf '#!/bin/sh\n[ "$RANK" = 1 ] && { echo "rank 1 says: no" >&2; exit 3; }\nexec %s "$@" --timeout 5\n' \
		"$REPO/build/bin/cnn_train" >"$d/cnn_train"
	chmod +x "$d/cnn_train"
	run --separate-stderr env ROUNDS=1 PYTHON="$PY" CNN_TRAIN="$d/cnn_train" "$REPO/bench/startup_local.sh"
	assert_failure 1
	[[ "$stderr" == *"bench: cnn_train failed:"*"rank 1 says: no"* ]] || fail "stderr: $stderr"
}

# topo_row WAY: topo_step's row for WAY in $output, 0 < lowest <= q1 <=
# median <= q3; its median printed
topo_row() {
	local line m q1 q3 low
	line=$(grep "^$1 " <<<"$output")
	read -r _ m q1 q3 low <<<"$line"
	awk -v m="$m" -v a="$q1" -v b="$q3" -v l="$low" 'BEGIN { exit !(l > 0 && l <= a && a <= m && m <= b) }' ||
		fail "row '$line': expected 0 < lowest <= q1 <= median <= q3"
	echo "$m"
}

@test "topo_step.sh ROUNDS=3: each way's median within its quartiles, the ratios kept (in slurmstepd) and task (in each task's child, no hwloc plugins) over discover; the kept folder removed; a bad ROUNDS refused" {
	[ "$(id -u)" = 0 ] || skip "the kept topology is root's"
	run env ROUNDS=0 "$REPO/bench/topo_step.sh"
	assert_failure 2
	assert_output "bench: ROUNDS=0: expected a count of rounds"
	run --separate-stderr env ROUNDS=3 TMPDIR="$BATS_TEST_TMPDIR" "$REPO/bench/topo_step.sh"
	assert_success
	assert_line --regexp '^# the plugin.s binding work per step \(topology and plan, 2 CPU tasks\), 3 rounds, hwloc API 2\.[0-9]+\.[0-9]+$'
	local w line
	declare -A med
	for w in discover kept write task-xml task; do
		med[$w]=$(topo_row "$w")
	done
	line=$(grep '^kept/discover ' <<<"$output")
	[[ "$line" =~ ^kept/discover\ ([0-9.]+),\ discover-kept\ (-?[0-9.]+)\ ms\ a\ step$ ]] || fail "line '$line'"
	awk -v r="${BASH_REMATCH[1]}" -v d="${BASH_REMATCH[2]}" -v k="${med[kept]}" -v g="${med[discover]}" \
		'BEGIN { e = k / g - r; f = g - k - d; exit !(e < 0.002 && e > -0.002 && f < 0.002 && f > -0.002) }' ||
		fail "'$line' is not from the medians ${med[kept]} and ${med[discover]}"
	line=$(grep '^task/discover ' <<<"$output")
	[[ "$line" =~ ^task/discover\ ([0-9.]+),\ discover-task\ (-?[0-9.]+)\ ms\ a\ step$ ]] || fail "line '$line'"
	awk -v r="${BASH_REMATCH[1]}" -v d="${BASH_REMATCH[2]}" -v k="${med[task]}" -v g="${med[discover]}" \
		'BEGIN { e = k / g - r; f = g - k - d; exit !(e < 0.002 && e > -0.002 && f < 0.002 && f > -0.002) }' ||
		fail "'$line' is not from the medians ${med[task]} and ${med[discover]}"
	line=$(grep '^task/task-xml ' <<<"$output")
	[[ "$line" =~ ^task/task-xml\ ([0-9.]+):\ the\ mapped\ copy\ against\ the\ export.s\ parse,\ in\ a\ task$ ]] || fail "line '$line'"
	quotient_ok "${BASH_REMATCH[1]}" "${med[task]}" "${med[task-xml]}" 0.0005 0.0005
	# its folder is gone
	[ -z "$(compgen -G "$BATS_TEST_TMPDIR/topo-step.*")" ]
	# EXPORT: another machine's export as a task of it loads it, and its
	# mapped copy: two ways more
	run --separate-stderr env ROUNDS=3 TMPDIR="$BATS_TEST_TMPDIR" EXPORT="$REPO/tests/topologies/dgx-h100.xml" \
		"$REPO/bench/topo_step.sh"
	assert_success
	for w in export export-map; do
		med[$w]=$(topo_row "$w")
	done
	line=$(grep '^export: ' <<<"$output")
	[[ "$line" == "export: $REPO/tests/topologies/dgx-h100.xml, loaded as a task loads its node's, and the plan of 8 tasks and 8 GPUs; export-map/export "* ]] ||
		fail "line '$line'"
	quotient_ok "${line##* }" "${med[export-map]}" "${med[export]}" 0.0005 0.0005
	[ -z "$(compgen -G "$BATS_TEST_TMPDIR/topo-step.*")" ]
	run --separate-stderr env ROUNDS=3 EXPORT=/nonexistent.xml "$REPO/bench/topo_step.sh"
	assert_failure 2
	assert_equal "$stderr" "bench: EXPORT=/nonexistent.xml: not a readable file"
}

@test "onednn_versions.sh: refuses a bad count, and a release whose build is missing, naming what to run" {
	run env REPEATS=0 "$REPO/bench/onednn_versions.sh"
	assert_failure 2
	assert_output "bench: REPEATS=0: expected a positive count"
	[ "$(id -u)" = 0 ] || skip "the release's root needs root"
	run env RELEASE=99.99 "$REPO/bench/onednn_versions.sh"
	assert_failure 2
	assert_output "bench: no cnn_train built for 99.99 (run: tests/cluster/release.sh run 99.99 make)"
}
