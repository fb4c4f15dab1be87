#!/usr/bin/env bats
# cnn_train --device cuda end to end where no GPU is: main.c's GPU path
# (its batches, evaluation, checkpoints, the options it hands the module)
# with the GPU module built on cuemu (tests/Makefile:
# cnn_train_cuda_emu.so: net.c, prepare.c, describe.c, gpu.c, graph.c,
# comm_nccl.c and the kernels as they are, cuemu for CUDA, cuDNN, cuBLAS
# and NCCL: one rank, or several processes over TCP).
# test_gpu_step checks the module's arithmetic against the golden file;
# these check what cnn_train does with it.  On a GPU, .gpu/run.sh train
# and gloo2 run the real module.  Slurm's runs of it are in trainer.bats.
# bats file_tags=trainer,gpu

load helpers
plain_data

# each test minutes of one core at most; make check runs this file beside
# the cluster's tests, which share the cores (tests/run.sh)
BATS_TEST_TIMEOUT=300

CNN="$REPO/build/bin/cnn_train"
EMU="$REPO/build/tests/cuemu/cnn_train_cuda_emu.so"
# 64 images, 8 steps an epoch, batch 8: a few seconds a run on cuemu
SMALL=(--train-limit 64 --test-limit 16 --batch-size 8 --progress lines --log-every 1000)
# The default --conv-layout auto's part of the "# GPU:" line at SMALL's
# sizes: each batch size's layout by cudnnFind's totals, the training
# batch's by its step's graph timed in both
LAYOUT_AUTO='batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms; the step.s graph timed in each layout at its capture\), batch 16 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\)'
# In fp32 with conv1 direct, cuDNN's part of it: conv2's three calls at
# each batch size, each as kept (its algorithm and math)
CUDNN_FP32='batch 8 cuDNN: conv2 forward [A-Z0-9_]+ \([A-Za-z ,]+\), conv2 backward-data [A-Z0-9_]+ \([A-Za-z ,]+\), conv2 backward-filter [A-Z0-9_]+ \([A-Za-z ,]+\), batch 16 cuDNN: conv2 forward [A-Z0-9_]+ \([A-Za-z ,]+\), conv2 backward-data [A-Z0-9_]+ \([A-Za-z ,]+\), conv2 backward-filter [A-Z0-9_]+ \([A-Za-z ,]+\)'
# The default --pdl auto's part of it (cuemu is an sm_90: the step's graph
# timed with and without programmatic edges)
PDL_AUTO='programmatic launch auto \(the step.s graph timed with and without\)'


# ranks2 BACKEND OUT ARGS...: cnn_train as ranks 0 and 1 of a world of two
# on this machine, as torchrun would start them; rank 0's output is the
# run's, rank 1's in OUT.r1
ranks2() {
	local be=$1 out=$2 port pid
	shift 2
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 DDP_BACKEND=$be NCCL_SOCKET_IFNAME=lo \
		GLOO_SOCKET_IFNAME=lo timeout 300 "$CNN" "$@" >"$out.r1" 2>&1 3>&- &
	pid=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 DDP_BACKEND=$be NCCL_SOCKET_IFNAME=lo \
		GLOO_SOCKET_IFNAME=lo run --separate-stderr timeout 300 "$CNN" "$@"
	wait "$pid" || { cat "$out.r1"; return 1; }
}

setup() {
	[ -f "$EMU" ] || skip "no cuemu GPU module ($EMU): CUDA's headers are missing here (see tests/Makefile)"
	export CNN_TRAIN_CUDA_MODULE="$EMU"
}

# In fp32 the GPU path's step is the CPU path's: the same batches, the same
# dropout masks (one counter-based generator), the same update; only the
# sums' order differs (oneDNN's against cuemu's cuDNN and the project's
# kernels).  Measured: mean |difference| 4.6e-10 after 8 steps (the
# largest 1.7e-7), allowed 1e-7; two ranks in trainer.bats 1.8e-8.
@test "--device cuda --precision fp32 trains what --device cpu trains (cuemu)" {
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --eval --device cpu --dump-params "$BATS_TEST_TMPDIR/cpu.bin"
	assert_success
	# the CPU's first 3 steps are warm-up, the GPU's 5; the GPU's steps
	# timed between synchronizations, as PyTorch's benchmark times them
	assert_line --regexp '^# timed: 5 steps \(4 to 8\), 40 images a rank, [0-9.]+ s of the steps. own time$'
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --eval --device cuda --precision fp32 --conv1 direct \
		--fc2 cublas --dump-params "$BATS_TEST_TMPDIR/gpu.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# timed: 3 steps \(6 to 8\), 24 images a rank, [0-9.]+ s between the device.s synchronizations$'
	assert_line --regexp '^# cnn_train: world 1 \(local\), model 1x28x28->10 \(1199882 params\)'
	assert_line --regexp "^# GPU: cuemu .*, fp32, conv1 direct, $CUDNN_FP32, $LAYOUT_AUTO, CUDA graph, backward streams auto \\(1 or 2: the step.s graph timed both ways\\), $PDL_AUTO\$"
	assert_line --regexp '^test: loss [0-9.]+ accuracy [0-9.]+% \(16 images\)$'
	# the epoch's evaluation is the run's: one, not the same again after it
	[ "$(grep -c '^test:' <<<"$output")" -eq 1 ]
	params_within "$BATS_TEST_TMPDIR/cpu.bin" "$BATS_TEST_TMPDIR/gpu.bin" 1e-7
	# fc2 and the loss in one launch (--fc2 fused): the same training, its
	# sums in another order
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --eval --device cuda --precision fp32 --conv1 direct \
		--fc2 fused --dump-params "$BATS_TEST_TMPDIR/fused.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp "^# GPU: cuemu .*, fp32, conv1 direct, $CUDNN_FP32, fc2 fused, $LAYOUT_AUTO, CUDA graph, backward streams auto \\(1 or 2: the step.s graph timed both ways\\), $PDL_AUTO\$"
	params_within "$BATS_TEST_TMPDIR/cpu.bin" "$BATS_TEST_TMPDIR/fused.bin" 1e-7
}

# The graph replays the step's kernels in the order they were captured,
# and the second stream computes the same sums beside the first: the same
# bits each way (CUEMU_STREAMS=lazy: the streams' work runs as late or as
# early as its waits allow, as a GPU may run it).  In NCHW: the default
# layout, auto, times the graph in both layouts where there is one and
# takes cudnnFind's pick where there is none, and the layouts' sums differ.
@test "the CUDA graph, --no-graph, --backward-streams 2 and auto give the same parameters bit for bit; auto keeps the faster graph (cuemu)" {
	local v crc=() outs=()
	for v in "" "--no-graph" "--backward-streams 2" "--backward-streams auto" \
		"--no-graph --backward-streams auto"; do
		# shellcheck disable=SC2086
		CUEMU_STREAMS=lazy run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --device cuda \
			--precision fp32 --conv1 cudnn --conv-layout nchw $v --dump-params "$BATS_TEST_TMPDIR/p${#crc[@]}.bin" \
			--log-json "$BATS_TEST_TMPDIR/j${#crc[@]}.json"
		echo "$stderr"
		assert_success
		outs+=("$output")
		crc+=("$(sed -n 's/^params: identical on all 1 ranks (crc32 \([0-9a-f]*\))$/\1/p' <<<"$output")")
	done
	echo "crc32: ${crc[*]}"
	[ -n "${crc[0]}" ]
	for v in 1 2 3 4; do
		assert_equal "${crc[$v]}" "${crc[0]}"
		cmp "$BATS_TEST_TMPDIR/p0.bin" "$BATS_TEST_TMPDIR/p$v.bin"
	done
	# auto: the step captured both ways, each replayed on its batch (the
	# parameters put back after: the same bits as above), the faster kept.
	# cuemu's clock overlaps a graph's branches, so two streams are faster
	# there and the kept graph is --backward-streams 2's
	output=${outs[3]}
	mapfile -t lines <<<"$output"
	assert_line --regexp '^# GPU: cuemu .*, CUDA graph, backward streams auto \(1 or 2: the step.s graph timed both ways\), programmatic launch auto \(the step.s graph timed with and without\)$'
	local line kept ms1 ms2 n
	line=$(grep '^# backward streams auto (batch 8): ' <<<"$output")
	echo "$line"
	read -r kept ms1 ms2 n < <(sed -E 's/^.*: ([12]) kept; a replay of the step took ([0-9.]+) ms with 1, ([0-9.]+) ms with 2 \(the least of ([0-9]+) each\)$/\1 \2 \3 \4/' <<<"$line")
	echo "kept $kept: $ms1 ms, $ms2 ms, $n replays each"
	# (cuemu's build: 1 to 10, tests/Makefile's CNN_TUNE_MIN; a GPU's 2 to 10)
	[ "$n" -ge 1 ]
	[ "$n" -le 10 ]
	# the lesser time kept, one stream on a tie
	assert_equal "$kept" "$(awk -v a="$ms1" -v b="$ms2" 'BEGIN { print (b < a) ? 2 : 1 }')"
	assert_equal "$kept" 2
	# the census is the kept graph's: --backward-streams 2's
	assert_equal "$(grep '^# CUDA graph of a training step' <<<"$output")" \
		"$(grep '^# CUDA graph of a training step' <<<"${outs[2]}")"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/j3.json" "$BATS_TEST_TMPDIR/j2.json" "$ms1" "$ms2" <<'PY'
import json, sys
a, b = (json.load(open(f))["cuda_graph"] for f in sys.argv[1:3])
assert a["backward_streams"] == 2 and b["backward_streams"] == 2, (a, b)
assert a["streams_ms"] == [float(sys.argv[3]), float(sys.argv[4])], a
assert b["streams_ms"] is None, b
assert {k: v for k, v in a.items() if k != "streams_ms"} == {k: v for k, v in b.items() if k != "streams_ms"}
PY
	# without a graph there is nothing to time: one stream, said
	output=${outs[4]}
	mapfile -t lines <<<"$output"
	assert_line --regexp '^# GPU: cuemu .*, no graph, backward streams auto: 1 \(no graph to time both ways\)$'
	! grep -q '^# backward streams auto' <<<"$output" || false
}

# --pdl (sm_90 and later): a copy of the kept graph whose edges from a
# kernel into one of the project's kernels are programmatic (each of those
# waits for its predecessors first: tools/pdl_lint), so it is launched
# while the kernel before it runs.  cuemu runs such an edge as any other
# (and fails a kernel reached through one that does not wait), and its
# clock takes the launch's 2 us off it: auto keeps that graph there.
@test "--pdl on, auto and off train the same parameters bit for bit; the programmatic edges lead into the project's kernels; auto keeps the faster graph (cuemu)" {
	local v i crc=() outs=()
	for v in "" "--pdl off" "--pdl on" "--pdl auto"; do
		# (bats' run uses i: the runs are counted by crc's entries)
		# shellcheck disable=SC2086
		CUEMU_STREAMS=lazy run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --device cuda \
			--precision fp32 --conv1 direct --conv-layout nchw --backward-streams 2 $v \
			--dump-params "$BATS_TEST_TMPDIR/p${#crc[@]}.bin" --log-json "$BATS_TEST_TMPDIR/j${#crc[@]}.json" \
			--cuda-graph-dot "$BATS_TEST_TMPDIR/g${#crc[@]}.dot"
		echo "$stderr"
		assert_success
		outs+=("$output")
		crc+=("$(sed -n 's/^params: identical on all 1 ranks (crc32 \([0-9a-f]*\))$/\1/p' <<<"$output")")
	done
	echo "crc32: ${crc[*]}"
	[ -n "${crc[0]}" ]
	for i in 1 2 3; do
		assert_equal "${crc[$i]}" "${crc[0]}"
		cmp "$BATS_TEST_TMPDIR/p0.bin" "$BATS_TEST_TMPDIR/p$i.bin"
	done
	# off: the graph as captured, nothing said
	! grep -q 'programmatic' <<<"${outs[1]}" || false
	! grep -q 'style=dashed' "$BATS_TEST_TMPDIR/g1.dot" || false
	# on: the census says how many; the drawing has as many dashed edges,
	# each from a kernel (a box) into one of the project's (not a cuDNN,
	# cuBLAS or NCCL call)
	output=${outs[2]}
	mapfile -t lines <<<"$output"
	assert_line --regexp '^# GPU: cuemu .*, CUDA graph, weight gradients on a second stream, programmatic launch on$'
	local n
	n=$(sed -n 's/^# programmatic launch on (batch 8): \([0-9]*\) programmatic edges$/\1/p' <<<"$output")
	echo "on: $n edges"
	[ -n "$n" ]
	[ "$n" -gt 3 ]
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/g2.dot" "$n" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
label = dict(re.findall(r'^  (n\d+) \[label="([^"]*)" shape=box\];$', text, re.M))
dashed = re.findall(r'^  (n\d+) -> (n\d+) \[style=dashed\];$', text, re.M)
assert len(dashed) == int(sys.argv[2]), (len(dashed), sys.argv[2])
for a, b in dashed:
    assert a in label and b in label, (a, b)   # both kernels
    assert not re.match(r'(cudnn|cublas|nccl)', label[b]), label[b]
print(len(dashed), "dashed edges, into", sorted({label[b] for _, b in dashed}))
PY
	# auto, and the default, which is auto: timed both ways, the faster
	# kept (cuemu's clock: with them)
	local line kept ms1 ms2 na k ms=()
	for i in 3 0; do
		output=${outs[$i]}
		mapfile -t lines <<<"$output"
		assert_line --regexp '^# GPU: cuemu .*, programmatic launch auto \(the step.s graph timed with and without\)$'
		line=$(grep '^# programmatic launch auto (batch 8): ' <<<"$output")
		echo "$line"
		read -r kept ms1 ms2 na k < <(sed -E 's/^.*: (on|off) kept; a replay of the step took ([0-9.]+) ms as captured, ([0-9.]+) ms with ([0-9]+) programmatic edges \(the least of ([0-9]+) each\)$/\1 \2 \3 \4 \5/' <<<"$line")
		assert_equal "$na" "$n"
		assert_equal "$kept" "$(awk -v a="$ms1" -v b="$ms2" 'BEGIN { print (b < a) ? "on" : "off" }')"
		assert_equal "$kept" on
		[ "$k" -ge 1 ]
		[ "$k" -le 10 ]
		ms+=("$ms1" "$ms2")
	done
	/usr/bin/python3 - "$BATS_TEST_TMPDIR"/j{1,2,3,0}.json "$n" "${ms[@]}" <<'PY'
import json, sys
off, on, auto, default = (json.load(open(f))["cuda_graph"] for f in sys.argv[1:5])
n, ms = int(sys.argv[5]), [float(x) for x in sys.argv[6:10]]
assert off["pdl"] is None, off
assert on["pdl"] == {"edges": n, "kept": True, "ms": None}, on
assert auto["pdl"] == {"edges": n, "kept": True, "ms": ms[0:2]}, auto
assert default["pdl"] == {"edges": n, "kept": True, "ms": ms[2:4]}, default
PY
	# an edge CUDA refuses as programmatic stays as captured, the others
	# are made: CUEMU_NO_PDL refuses those into fc2's classifier and the update
	local refused
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/g2.dot" >"$BATS_TEST_TMPDIR/into" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
label = dict(re.findall(r'^  (n\d+) \[label="([^"]*)"', text, re.M))
print(sum(label[b] in ("fc2_fused", "sgd_kernel") for _, b in re.findall(r'^  (n\d+) -> (n\d+) \[style=dashed\];$', text, re.M)))
PY
	refused=$(cat "$BATS_TEST_TMPDIR/into")
	[ "$refused" -gt 0 ]
	CUEMU_NO_PDL=fc2_fused,sgd_kernel CUEMU_STREAMS=lazy run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 \
		--device cuda --precision fp32 --conv1 direct --conv-layout nchw --backward-streams 2 --pdl on \
		--dump-params "$BATS_TEST_TMPDIR/p4.bin"
	echo "$stderr"
	assert_success
	assert_line "# programmatic launch on (batch 8): $((n - refused)) programmatic edges"
	[[ "$stderr" != *warning* ]]
	cmp "$BATS_TEST_TMPDIR/p0.bin" "$BATS_TEST_TMPDIR/p4.bin"
	# without a graph there is none, said
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 2 --device cuda --no-graph --pdl on
	assert_success
	assert_line --regexp '^# GPU: cuemu .*, no graph, .*, programmatic launch: none \(no CUDA graph to put it in\)$'
	! grep -q '^# programmatic launch' <<<"$output" || false
	# a bad value is named; on the CPU the option is said to be unused
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 1 --device cuda --pdl sometimes
	assert_failure
	[[ "$stderr" == *"--pdl"*"sometimes"* ]]
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 1 --device cpu --pdl on
	assert_success
	assert_line '# --pdl: GPU options, not used by this run on the CPU'
}

@test "--pdl with two ranks over NCCL: both time the same graphs, NCCL's node keeps its edges, the parameters are --pdl off's (cuemu)" {
	local opts=("${SMALL[@]}" --max-steps 8 --device cuda --precision fp32 --conv1 direct --conv-layout nchw \
		--backward-streams 1)
	ranks2 nccl "$BATS_TEST_TMPDIR/off" "${opts[@]}" --pdl off --dump-params "$BATS_TEST_TMPDIR/off.bin"
	echo "$stderr"
	assert_success
	! grep -q 'programmatic' <<<"$output" || false
	ranks2 nccl "$BATS_TEST_TMPDIR/auto" "${opts[@]}" --pdl auto --dump-params "$BATS_TEST_TMPDIR/auto.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# programmatic launch auto \(batch 8\): (on|off) kept; a replay of the step took [0-9.]+ ms as captured, [0-9.]+ ms with [0-9]+ programmatic edges \(the least of [0-9]+ each, summed over the ranks\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	cmp "$BATS_TEST_TMPDIR/off.bin" "$BATS_TEST_TMPDIR/auto.bin"
	ranks2 nccl "$BATS_TEST_TMPDIR/on" "${opts[@]}" --pdl on --dump-params "$BATS_TEST_TMPDIR/on.bin" \
		--cuda-graph-dot "$BATS_TEST_TMPDIR/on.dot"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# programmatic launch on \(batch 8\): [0-9]+ programmatic edges$'
	cmp "$BATS_TEST_TMPDIR/off.bin" "$BATS_TEST_TMPDIR/on.bin"
	# the update after the all-reduce follows NCCL's node by an edge as
	# captured
	grep -q 'ncclAllReduce' "$BATS_TEST_TMPDIR/on.dot"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/on.dot" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
label = dict(re.findall(r'^  (n\d+) \[label="([^"]*)"', text, re.M))
edges = re.findall(r'^  (n\d+) -> (n\d+)( \[style=dashed\])?;$', text, re.M)
dashed = [(a, b) for a, b, d in edges if d]
assert dashed, "no programmatic edge"
for a, b in dashed:
    assert not label[a].startswith("nccl") and not label[b].startswith("nccl"), (label[a], label[b])
assert any(label[a].startswith("nccl") and not d for a, b, d in edges), "no edge out of NCCL's node"
PY
}

@test "tools/pdl_lint: every kernel of the trainer waits first and every launch notes its node; a kernel or launch that does not is named (cuemu)" {
	run "$REPO/tests/tools/pdl_lint" "$REPO"/trainer/cuda/*.cu
	assert_success
	assert_output ""
	# the first kernel's pdl_enter() taken out
	local k="$BATS_TEST_TMPDIR/k.cu" first
	first=$(grep -n 'pdl_enter();' "$REPO/trainer/cuda/kernels.cu" | head -n 1 | cut -d: -f1)
	sed "${first}d" "$REPO/trainer/cuda/kernels.cu" >"$k"
	# (named at its body's brace, the line before)
	run "$REPO/tests/tools/pdl_lint" "$k"
	assert_failure
	assert_output "$k:$((first - 1)): a kernel whose first statement is not pdl_enter();"
	# pdl_enter() after another statement is not first
	sed "${first}s/pdl_enter();/int x_ = 0; (void)x_; pdl_enter();/" "$REPO/trainer/cuda/kernels.cu" >"$k"
	run "$REPO/tests/tools/pdl_lint" "$k"
	assert_failure
	assert_output "$k:$((first - 1)): a kernel whose first statement is not pdl_enter();"
	# a launch whose LAUNCHED(s) is gone
	local at
	at=$(grep -n 'LAUNCHED(s);' "$REPO/trainer/cuda/kernels.cu" | head -n 1 | cut -d: -f1)
	sed "${at}s/LAUNCHED(s);/cudaCheck(cudaGetLastError());/" "$REPO/trainer/cuda/kernels.cu" >"$k"
	run "$REPO/tests/tools/pdl_lint" "$k"
	assert_failure
	assert_output --regexp "^$k:[0-9]+: launch of [A-Za-z_0-9]+ with no LAUNCHED\(stream\) before the next return$"
	# comments do not count
	sed "${first}s|pdl_enter();|// pdl_enter();|" "$REPO/trainer/cuda/kernels.cu" >"$k"
	run "$REPO/tests/tools/pdl_lint" "$k"
	assert_failure
}

# tools/spill_check (make check runs it on trainer/cuda/*.cu, where nvcc
# is): a kernel that asks for 3 or more blocks an SM must not spill.  512
# threads at 4 blocks an SM leave 32 registers a thread, which 40 values
# live across a loop overflow; at 2 blocks (64) they fit, and a minimum
# under 3 is not held to it.  A file, and the local headers it includes,
# that ask for no minimum is not compiled at all (a comma in a header's
# __launch_bounds__ counts, at any depth).
@test "tools/spill_check: a kernel asking for 4 blocks an SM that spills is named; one that fits, and a file asking none, pass (nvcc)" {
	local nvcc=/usr/local/cuda/bin/nvcc t="$REPO/tests/tools/spill_check" d="$BATS_TEST_TMPDIR"
	[ -x "$nvcc" ] || skip "no nvcc ($nvcc): spill_check has nothing to compile with"
	kernel() { # NAME BLOCKS
		cat <<-EOF
		__global__ void __launch_bounds__(512, $2) $1(float *o, const float *in, int n)
		{
		    float a[40];
		#pragma unroll
		    for (int i = 0; i < 40; i++)
		        a[i] = in[threadIdx.x * 40 + i];
		    for (int k = 0; k < n; k++) {
		#pragma unroll
		        for (int i = 0; i < 40; i++)
		            a[i] = a[i] * a[(i + 1) % 40] + 1.0f;
		    }
		    float s = 0;
		#pragma unroll
		    for (int i = 0; i < 40; i++)
		        s += a[i];
		    o[threadIdx.x] = s;
		}
		EOF
	}
	kernel tight 4 >"$d/spills.cu"
	run "$t" "$nvcc" 80 90 -- "$d/spills.cu" -O3
	echo "$output"
	assert_failure 1
	assert_line --regexp '^spill_check: sm_80: tight\(float\*, float const\*, int\) asks for 4 blocks an SM and spills [1-9][0-9]* bytes: ask for fewer, or free registers$'
	assert_line --regexp '^spill_check: sm_90: tight\(float\*, float const\*, int\) asks for 4 blocks an SM '
	kernel roomy 2 >"$d/fits.cu"
	kernel tight 3 | sed 's/a\[40\]/a[8]/; s/< 40/< 8/g; s/% 40/% 8/; s/\* 40/* 8/' >>"$d/fits.cu"
	run "$t" "$nvcc" 80 90 -- "$d/fits.cu" -O3
	echo "$output"
	assert_success
	assert_output "spill_check: $d/fits.cu: 2 kernels of 3 or more blocks an SM checked, none spills"
	# no minimum asked, here or in its header: not compiled (an nvcc that
	# fails would say so)
	printf '__global__ void __launch_bounds__(256) k(float *o) { o[0] = 1; }\n#include "none.h"\n' >"$d/none.cu"
	printf '#define B 128\n__global__ void __launch_bounds__(B) h(float *o) { o[0] = 2; }\n' >"$d/none.h"
	run "$t" /bin/false 80 -- "$d/none.cu"
	assert_success
	assert_output "spill_check: $d/none.cu: no __launch_bounds__ asks for a minimum of blocks an SM: nothing to check"
	# a header's launch bounds with a minimum, behind a macro's comma: compiled
	printf '#define MIN(a, b) ((a) < (b) ? (a) : (b))\n__global__ void __launch_bounds__(256, MIN(3, 4)) h(float *o) { o[0] = 2; }\n' >"$d/none.h"
	run "$t" /bin/false 80 -- "$d/none.cu"
	assert_failure 2
	assert_output --partial "spill_check: /bin/false -ptx of $d/none.cu for compute_80 failed"
}

# cudnnFind times each algorithm once, and on a GPU its order at a small
# batch changes from run to run (an H200 at 64: the same step replayed in
# 0.223 ms in one run and 0.262 in the next).  At the graph's batch each
# of conv2's cuDNN calls times cudnnFind's candidates (those it timed
# within 2x of its pick) again as graphs of their runs and keeps the
# fastest.  cuemu's cudnnFind lists CUEMU_DNN_ALGOS of them, fastest
# first; CUEMU_SLOW_KERNELS makes its picks slow when they run.
@test "conv2's cuDNN calls at the graph's batch: cudnnFind's candidates timed again as graphs, the fastest kept (cuemu)" {
	local opts=("${SMALL[@]}" --max-steps 4 --device cuda --precision tf32 --conv1 direct --conv2 cudnn
		--conv-layout nchw)
	# one candidate each (cuemu's cudnnFind by default): nothing timed again
	run --separate-stderr "$CNN" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/one.bin"
	echo "$stderr"
	assert_success
	refute_line --partial "cudnnFind's candidates"
	# three each, cudnnFind's pick of the forward (0) and of the
	# backward-data (1) a hundred times slower when they run
	CUEMU_DNN_ALGOS=3 CUEMU_SLOW_KERNELS=cudnnConvolutionForward:0,cudnnConvolutionBackwardData:1 \
		run --separate-stderr "$CNN" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/three.bin"
	echo "$stderr"
	assert_success
	local t='([0-9.]+)'
	local re="^# GPU: .*, batch 8 conv2 cuDNN forward 1 kept \\(cudnnFind's candidates timed as graphs: 0 $t ms, 1 $t, 2 $t\\), batch 8 conv2 cuDNN backward-data 2 kept \\(cudnnFind's candidates timed as graphs: 1 $t ms, 2 $t, 3 $t\\), batch 8 conv2 cuDNN backward-filter 1 kept \\(cudnnFind's candidates timed as graphs: 1 $t ms, 2 $t, 3 $t\\), .*\$"
	assert_line --regexp "$re"
	local line
	line=$(grep -E "$re" <<<"$output")
	[[ $line =~ $re ]]
	local m=("${BASH_REMATCH[@]:1}")
	echo "times: ${m[*]}"
	# the slow picks timed slow, the others alike; a tie keeps cudnnFind's
	# order (the backward-filter: its pick)
	awk -v a="${m[0]}" -v b="${m[1]}" -v c="${m[2]}" 'BEGIN { exit !(a > 50 * b && b == c) }'
	awk -v a="${m[3]}" -v b="${m[4]}" -v c="${m[5]}" 'BEGIN { exit !(a > 50 * b && b == c) }'
	awk -v a="${m[6]}" -v b="${m[7]}" -v c="${m[8]}" 'BEGIN { exit !(a == b && b == c) }'
	# and each call's algorithm by name, as kept (conv1 direct: none of
	# its): the graph's batch the faster candidates (forward 1, backward-data
	# 2, backward-filter 1), the evaluation's cudnnFind's pick (forward 0)
	assert_line --regexp '^# GPU: .*, batch 8 cuDNN: conv2 forward IMPLICIT_PRECOMP_GEMM \([A-Za-z ,]+\), conv2 backward-data FFT \([A-Za-z ,]+\), conv2 backward-filter ALGO_1 \([A-Za-z ,]+\), batch 16 cuDNN: conv2 forward IMPLICIT_GEMM \('
	# only the graph's batch: the evaluation's keeps cudnnFind's picks
	refute_line --partial "batch 16 conv2 cuDNN"
	# every algorithm computes the same sums here: the same training
	cmp "$BATS_TEST_TMPDIR/one.bin" "$BATS_TEST_TMPDIR/three.bin"
	# --conv2 direct: conv2's cuDNN calls are not run, nothing timed
	CUEMU_DNN_ALGOS=3 run --separate-stderr "$CNN" "${opts[@]}" --conv2 direct
	assert_success
	refute_line --partial "cudnnFind's candidates"
}

# --conv2 auto times each call alone and picks the faster, but what a
# step pays around its calls (the pool's backward a cuDNN backward-data
# needs, conv1's weight gradient riding on conv2's, the launches between)
# is in no call's time: at the graph's capture the step is captured with
# the calls' picks, all cuDNN and all the project's kernels, each replayed
# on its batch (the state put back after) and the fastest kept.  On
# cuemu's additive clock the picks are never slower than the others.
@test "--conv2 auto: the step's graph timed with each call's pick, all cuDNN and all direct, the fastest kept (cuemu)" {
	# (one backward stream: the three graphs alone; the default, auto,
	# below; the last option given wins; no programmatic edges, whose
	# timing follows conv2's; --test-limit 8: evaluation at the
	# training batch, so start-up prepares one batch size, not two)
	local opts=("${SMALL[@]}" --test-limit 8 --max-steps 4 --device cuda --precision tf32
		--conv-layout nchw --backward-streams 1 --pdl off)
	run --separate-stderr "$CNN" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/graph.bin" \
		--log-json "$BATS_TEST_TMPDIR/graph.json"
	echo "$stderr"
	assert_success
	local line gpu
	line=$(grep '^# conv2 auto (batch 8): ' <<<"$output")
	gpu=$(grep '^# GPU: ' <<<"$output")
	echo "$line"
	run /usr/bin/python3 - "$line" "$gpu" "$BATS_TEST_TMPDIR/graph.json" <<-'EOF'
	import json, re, sys
	line, gpu, js = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))["cuda_graph"]
	m = re.fullmatch(r"# conv2 auto \(batch 8\): (each call's own pick|all cuDNN|all direct) kept; "
	                 r"a replay of the step took ([\d.]+) ms with each call as timed alone \(forward (\w+), "
	                 r"backward-data (\w+), backward-filter (\w+)\), ([\d.]+) ms all cuDNN, ([\d.]+) ms all "
	                 r"direct \(the least of (\d+) each\)", line)
	assert m, line
	names = ["each call's own pick", "all cuDNN", "all direct"]
	ms = [float(m[2]), float(m[6]), float(m[7])]
	assert 1 <= int(m[8]) <= 10, line
	# the least time kept, the earlier on a tie
	kept = names.index(m[1])
	assert kept == min(range(3), key=lambda k: (ms[k], k)), (kept, ms)
	impl = {"cuDNN": 0, "direct": 1}
	picks = impl[m[3]] | impl[m[4]] << 1 | impl[m[5]] << 2
	bits = [picks, 0, 7][kept]
	# the # GPU: line tells batch 8's calls as the kept graph runs them
	f = re.search(r"batch 8 conv2 forward and pool (\w+) ", gpu)
	d = re.search(r"batch 8 conv2 .*?backward-data with conv1's weight gradient (\w+)/(\w+) ", gpu)
	w = re.search(r"batch 8 conv2 .*?backward-filter and bias gradient (\w+) ", gpu)
	assert f and d and w, gpu
	assert impl[f[1]] | impl[d[1]] << 1 | impl[w[1]] << 2 == bits, (bits, gpu)
	c2 = js["conv2_auto"]
	assert c2 == {"kept": ["picked", "cudnn", "direct"][kept], "picked_bits": picks, "kept_bits": bits,
	              "ms": {"picked": ms[0], "cudnn": ms[1], "direct": ms[2]}, "mixes": None}, c2
	assert js["streams_ms"] is None and js["backward_streams"] == 1, js
	print(kept)
	EOF
	echo "$output"
	assert_success
	# cuemu's clock adds each call's modelled time, so the picks win there;
	# the replays put the parameters and the momentum back: the graph's run
	# is the eager run, bit for bit
	assert_output 0
	run --separate-stderr "$CNN" "${opts[@]}" --no-graph --dump-params "$BATS_TEST_TMPDIR/eager.bin" \
		--log-json "$BATS_TEST_TMPDIR/eager.json"
	assert_success
	cmp "$BATS_TEST_TMPDIR/graph.bin" "$BATS_TEST_TMPDIR/eager.bin"
	! grep -q '^# conv2 auto' <<<"$output" || false
	# asked for, or fp32 (no tensor-core kernels): nothing to time (the
	# graph is captured at the third step)
	local v
	for v in "--conv2 cudnn" "--conv2 direct" "--precision fp32"; do
		# shellcheck disable=SC2086
		run --separate-stderr "$CNN" "${opts[@]}" $v --max-steps 3 --log-json "$BATS_TEST_TMPDIR/v.json"
		assert_success
		! grep -q '^# conv2 auto' <<<"$output" || false
		/usr/bin/python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))["cuda_graph"]; assert j["conv2_auto"] is None, j' \
			"$BATS_TEST_TMPDIR/v.json"
	done
	# with --backward-streams auto (the default), each of conv2's three by
	# both streams counts: six graphs, the fastest kept
	run --separate-stderr "$CNN" "${SMALL[@]}" --test-limit 8 --device cuda --precision tf32 --max-steps 3
	echo "$stderr"
	assert_success
	assert_line --regexp '^# conv2 auto \(batch 8\): .* kept; .*\(the least of [0-9]+ each, each with its faster backward streams\)$'
	assert_line --regexp '^# backward streams auto \(batch 8\): [12] kept; '
	# two ranks over NCCL replay as often and keep the same (the times
	# summed over the ranks)
	ranks2 nccl "$BATS_TEST_TMPDIR/n2" "${opts[@]}" --max-steps 3
	echo "$stderr"
	assert_success
	assert_line --regexp "^# conv2 auto \(batch 8\): each call's own pick kept; .*\(the least of [0-9]+ each, summed over the ranks\)$"
	assert_line --regexp '^params: identical on all 2 ranks '
}

# What a call costs in the step need not be what it costs alone (on a GPU
# two streams' kernels share the SMs; the H200 ran batch 64's step 15%
# slower with the calls' picks than all cuDNN), and when the picks lose,
# neither all cuDNN nor all direct need be the best of the rest: each of
# the six mixes of conv2's three calls is then timed beside the one kept,
# in its layout and streams, and the fastest kept.  CUEMU_STEP_SLOW_KERNELS
# makes a kernel slow in the step's graph alone: the project's
# backward-filter (the picks take it, cuemu's additive clock favouring it
# alone) makes the picks and all direct lose, and the best is the mix of
# the other two direct; all three of the project's conv2 kernels slow
# there leave all cuDNN the best, the mixes timed and passed over; a call
# whose kernel cannot launch here stays out of every mix.
@test "--conv2 auto: where the picks lose the step, each mix of conv2's calls is timed beside the one kept, the fastest kept (cuemu)" {
	local opts=("${SMALL[@]}" --test-limit 8 --max-steps 3 --device cuda --precision tf32
		--conv-layout nchw --backward-streams 1 --pdl off) slow want
	for slow in conv3_wgrad_k:mix:3 conv3_igemm_tf32_k,conv3_igemm_k,conv3_wgrad_k:cudnn:0; do
		want=${slow#*:}
		CUEMU_STEP_SLOW_KERNELS=${slow%%:*} run --separate-stderr "$CNN" "${opts[@]}" \
			--log-json "$BATS_TEST_TMPDIR/m.json"
		echo "$stderr"
		assert_success
		line=$(grep '^# conv2 auto (batch 8): ' <<<"$output")
		echo "$line"
		run /usr/bin/python3 - "$line" "$BATS_TEST_TMPDIR/m.json" "${want%%:*}" "${want#*:}" <<-'EOF'
		import json, re, sys
		line, js, want, want_bits = sys.argv[1], json.load(open(sys.argv[2]))["cuda_graph"], sys.argv[3], int(sys.argv[4])
		names = ["all cuDNN", "forward direct (the rest cuDNN)", "backward-data direct (the rest cuDNN)",
		         "forward and backward-data direct (the rest cuDNN)", "backward-filter direct (the rest cuDNN)",
		         "forward and backward-filter direct (the rest cuDNN)",
		         "backward-data and backward-filter direct (the rest cuDNN)", "all direct"]
		alt = "|".join(re.escape(n) for n in names)
		m = re.fullmatch(r"# conv2 auto \(batch 8\): (.+?) kept; a replay of the step took ([\d.]+) ms with each call "
		                 r"as timed alone \(forward (\w+), backward-data (\w+), backward-filter (\w+)\), ([\d.]+) ms all "
		                 r"cuDNN, ([\d.]+) ms all direct \(the least of (\d+) each\); the picks having lost, each mix of "
		                 r"the three timed beside (all cuDNN|all direct): ([\d.]+) ms that one((?:, [\d.]+ (?:%s)){6}) "
		                 r"\(the least of (\d+) each\)" % alt, line)
		assert m, line
		first = [float(m[2]), float(m[6]), float(m[7])]
		impl = {"cuDNN": 0, "direct": 1}
		picks = impl[m[3]] | impl[m[4]] << 1 | impl[m[5]] << 2
		# cuemu's picks are all direct, and lost in the step
		assert picks == 7 and first[0] > min(first), (picks, first)
		beside = ["each call's own pick", "all cuDNN", "all direct"][min(range(3), key=lambda k: (first[k], k))]
		assert m[9] == beside, (m[9], beside)
		mix = [(names.index(n), float(t)) for t, n in re.findall(r", ([\d.]+) (%s)" % alt, m[11])]
		assert [b for b, _ in mix] == [1, 2, 3, 4, 5, 6], mix
		assert 1 <= int(m[12]) <= 10, line
		# the least kept, a tie to the one beside
		base = float(m[10])
		best = min(mix, key=lambda bt: bt[1])
		kept_bits, kept = (best[0], "mix") if best[1] < base else ([0, 7][m[9] == "all direct"], "cudnn" if m[9] == "all cuDNN" else "direct")
		assert (kept, kept_bits) == (want, want_bits), (kept, kept_bits, line)
		assert m[1] == (names[kept_bits] + " (a mix)" if kept == "mix" else m[9]), m[1]
		c2 = js["conv2_auto"]
		assert c2 == {"kept": kept, "picked_bits": picks, "kept_bits": kept_bits,
		              "ms": {"picked": first[0], "cudnn": first[1], "direct": first[2]},
		              "mixes": {"beside": {"all cuDNN": "cudnn", "all direct": "direct"}[m[9]], "beside_ms": base,
		                        "bits": [1, 2, 3, 4, 5, 6], "ms": [t for _, t in mix]}}, c2
		EOF
		echo "$output"
		assert_success
	done
	# where one of the project's calls cannot launch here (its backward-
	# filter refused: cuDNN's stands in), the mixes keep to the picks'
	# direct calls, as many as ever: the project's forward slow in the
	# step, the backward-data alone direct is kept
	CUEMU_FAIL_KERNELS=conv3_wgrad_k CUEMU_STEP_SLOW_KERNELS=conv3_igemm_tf32_k run --separate-stderr \
		"$CNN" "${opts[@]}" --log-json "$BATS_TEST_TMPDIR/f.json"
	echo "$stderr"
	assert_success
	[[ $stderr == *"the project's kernels for conv2's backward-filter failed to launch at start-up"* ]]
	assert_line --regexp '^# conv2 auto \(batch 8\): backward-data direct \(the rest cuDNN\) \(a mix\) kept; .* each call as timed alone \(forward direct, backward-data direct, backward-filter cuDNN\), '
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/f.json" <<-'EOF'
	import json, sys
	c2 = json.load(open(sys.argv[1]))["cuda_graph"]["conv2_auto"]
	assert c2["picked_bits"] == 3 and c2["kept_bits"] == 2 and c2["kept"] == "mix", c2
	assert c2["ms"]["direct"] == c2["ms"]["picked"], c2      # all direct is the picks here
	assert c2["mixes"]["bits"] == [1, 2, 3, 0, 1, 2], c2    # b & the picks' bits
	ms = c2["mixes"]["ms"]
	assert min(ms) == ms[1] < c2["mixes"]["beside_ms"], c2
	EOF
	# two ranks over NCCL time the mixes as often and keep the same
	CUEMU_STEP_SLOW_KERNELS=conv3_wgrad_k ranks2 nccl "$BATS_TEST_TMPDIR/n2" "${opts[@]}" --max-steps 3
	echo "$stderr"
	assert_success
	assert_line --regexp "^# conv2 auto \(batch 8\): forward and backward-data direct \(the rest cuDNN\) \(a mix\) kept; .*\(the least of [0-9]+ each, summed over the ranks\); the picks having lost, each mix of the three timed beside all cuDNN: .* \(the least of [0-9]+ each, summed over the ranks\)$"
	assert_line --regexp '^params: identical on all 2 ranks '
}

# --conv-layout auto: cudnnFind's totals pick each batch size's layout from
# the convolution calls alone; the graph's batch keeps both layouts'
# algorithms and at the capture the step is timed in each (with each
# layout's conv2 calls and streams), the faster kept.  The eager steps
# before the capture run in cudnnFind's pick.  On cuemu's clock, conv2 by
# cuDNN, NHWC wins; CUEMU_SLOW_KERNELS makes the NHWC pool's kernel cost 100
# times its time, and NCHW wins.
@test "--conv-layout auto: the step's graph timed in NCHW and NHWC, the faster kept (cuemu)" {
	local opts=("${SMALL[@]}" --max-steps 6 --device cuda --precision tf32 --conv2 cudnn)
	local re='^# conv layout auto \(batch 8\): (NCHW|NHWC) kept; a replay of the step took ([0-9.]+) ms in NCHW, ([0-9.]+) ms in NHWC \(the least of ([0-9]+) each, each layout with its faster conv2 calls and backward streams\)$'
	local slow kept first ms1 ms2 n line
	for slow in "" maxpool2_fwd_nhwc_tile; do
		CUEMU_SLOW_KERNELS=$slow run --separate-stderr "$CNN" "${opts[@]}" --conv-layout auto \
			--dump-params "$BATS_TEST_TMPDIR/auto.bin" --log-json "$BATS_TEST_TMPDIR/auto.json"
		echo "$stderr"
		assert_success
		# the # GPU: line, before the capture: cudnnFind's pick, and that
		# the graph's batch is timed in both
		first=$(sed -nE 's/^# GPU: .*, batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms; the step.s graph timed in each layout at its capture\), batch 16 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\), CUDA graph, .*$/\1/p' <<<"$output")
		[ -n "$first" ]
		line=$(grep -E "$re" <<<"$output")
		echo "$line"
		read -r kept ms1 ms2 n < <(sed -E "s/$re/\1 \2 \3 \4/" <<<"$line")
		[ "$n" -ge 1 ]
		[ "$n" -le 10 ]
		# the lesser kept; a tie to NCHW (the first on every rank)
		assert_equal "$kept" "$(awk -v a="$ms1" -v b="$ms2" 'BEGIN { print b < a ? "NHWC" : "NCHW" }')"
		assert_equal "$kept" "$([ -n "$slow" ] && echo NCHW || echo NHWC)"
		/usr/bin/python3 - "$BATS_TEST_TMPDIR/auto.json" "$kept" "$ms1" "$ms2" <<-'PY'
		import json, sys
		g = json.load(open(sys.argv[1]))["cuda_graph"]
		assert g["conv_layout"] == sys.argv[2].lower(), g
		assert g["layout_ms"] == [float(sys.argv[3]), float(sys.argv[4])], g
		PY
		# the kept graph is that layout's own: the census of a run in it
		CUEMU_SLOW_KERNELS=$slow run --separate-stderr "$CNN" "${opts[@]}" --conv-layout "${kept,,}" \
			--dump-params "$BATS_TEST_TMPDIR/forced.bin" --log-json "$BATS_TEST_TMPDIR/forced.json"
		assert_success
		! grep -q '^# conv layout auto' <<<"$output" || false
		/usr/bin/python3 - "$BATS_TEST_TMPDIR/auto.json" "$BATS_TEST_TMPDIR/forced.json" <<-'PY'
		import json, sys
		a, f = (json.load(open(p))["cuda_graph"] for p in sys.argv[1:3])
		assert f["layout_ms"] is None, f
		skip = ("layout_ms",)
		assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in f.items() if k not in skip}, (a, f)
		PY
		# where the kept layout is cudnnFind's, the eager steps before the
		# capture ran in it too: the run is the forced one bit for bit
		if [ "$kept" = "$first" ]; then
			cmp "$BATS_TEST_TMPDIR/auto.bin" "$BATS_TEST_TMPDIR/forced.bin"
		fi
	done
	# a layout asked for, or no graph: nothing timed
	run --separate-stderr "$CNN" "${opts[@]}" --conv-layout auto --no-graph --max-steps 2
	assert_success
	! grep -q '^# conv layout auto' <<<"$output" || false
	assert_line --regexp '^# GPU: .*, batch 8 (NCHW|NHWC) \(convolutions [0-9.]+ ms, (NCHW|NHWC) [0-9.]+ ms\), .*no graph'
	# two ranks over NCCL time alike and keep the same
	ranks2 nccl "$BATS_TEST_TMPDIR/n2" "${opts[@]}" --conv-layout auto --max-steps 3
	echo "$stderr"
	assert_success
	assert_line --regexp '^# conv layout auto \(batch 8\): NHWC kept; .*, summed over the ranks\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
}

# The GPU's parameters and momentum go to the checkpoint and come back;
# the step counter drives dropout's masks, so with dropout on a resumed
# run is the uninterrupted one bit for bit.
@test "a GPU run resumed from its checkpoint continues bit for bit, dropout on (cuemu)" {
	local d="$BATS_TEST_TMPDIR/ck" opts=("${SMALL[@]}" --epochs 2 --device cuda --precision fp32 --conv1 direct)
	run --separate-stderr "$CNN" "${opts[@]}" --max-steps 5 --checkpoint-dir "$d"
	echo "$stderr"
	assert_success
	[ -f "$d/checkpoint.bin" ]
	run --separate-stderr "$CNN" "${opts[@]}" --checkpoint-dir "$d" --resume --dump-params "$BATS_TEST_TMPDIR/resumed.bin"
	echo "$stderr"
	assert_success
	assert_line "# resumed from $d/checkpoint.bin: epoch 1, step 5 of it, 5 steps done"
	assert_line --regexp '^done: 16 steps, '
	run --separate-stderr "$CNN" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/straight.bin"
	assert_success
	cmp "$BATS_TEST_TMPDIR/resumed.bin" "$BATS_TEST_TMPDIR/straight.bin"
}

# A requeued job may land where the other device is (a GPU node's job on a
# CPU node, or back): the checkpoint is the same file either way, and the
# run continues from it, dropout and momentum included, as the straight
# CPU run goes (the sums' order aside: 1e-7, as in fp32 above).
@test "a checkpoint written on the CPU resumes on the GPU, and one written on the GPU on the CPU (cuemu)" {
	local opts=("${SMALL[@]}" --epochs 2 --precision fp32 --conv1 direct)
	run --separate-stderr "$CNN" "${opts[@]}" --device cpu --dump-params "$BATS_TEST_TMPDIR/straight.bin"
	assert_success
	for from in cpu cuda; do
		local to=cuda d="$BATS_TEST_TMPDIR/ck_$from"
		[ "$from" = cpu ] || to=cpu
		run --separate-stderr "$CNN" "${opts[@]}" --device "$from" --max-steps 5 --checkpoint-dir "$d"
		assert_success
		run --separate-stderr "$CNN" "${opts[@]}" --device "$to" --checkpoint-dir "$d" --resume \
			--dump-params "$BATS_TEST_TMPDIR/$from-$to.bin"
		echo "$stderr"
		assert_success
		assert_line "# resumed from $d/checkpoint.bin: epoch 1, step 5 of it, 5 steps done"
		assert_line --regexp '^done: 16 steps, '
		params_within "$BATS_TEST_TMPDIR/straight.bin" "$BATS_TEST_TMPDIR/$from-$to.bin" 1e-7
	done
}

# TF32 and bf16 through conv2's tensor-core kernels (cuemu's wmma) and
# conv1's direct ones, TF32 in NCHW and bf16 in NHWC (the other two pairs
# are test_gpu_step's): the options reach the module, and it trains near
# the fp32 CPU run.  Measured after 8 steps, mean |difference|: TF32
# 5.6e-6 (its 10-bit operands flip more ReLU gates and max-pool picks;
# test_gpu_step's table has the reasons), bf16 9.4e-5; allowed 5e-5 and
# 3e-4, under a shifted batch's 4.7e-4.
@test "--precision tf32 and bf16 with --conv2 direct train near the fp32 CPU run (cuemu)" {
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --device cpu --dump-params "$BATS_TEST_TMPDIR/cpu.bin"
	assert_success
	local pair prec layout
	for pair in tf32:nchw bf16:nhwc; do
		prec=${pair%:*} layout=${pair#*:}
		run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 8 --device cuda --precision "$prec" \
			--conv1 direct --conv2 direct --conv-layout "$layout" --dump-params "$BATS_TEST_TMPDIR/$prec.bin"
		echo "$stderr"
		assert_success
		assert_line --regexp "^# GPU: cuemu .*, $([ "$prec" = tf32 ] && echo TF32 || echo "bf16 with fp32 master weights"), conv1 direct, conv2 direct \(tensor cores\)(, batch [0-9]+ fc2 .*)?, ${layout^^}, CUDA graph, backward streams auto \(1 or 2: the step.s graph timed both ways\), $PDL_AUTO$"
		params_within "$BATS_TEST_TMPDIR/cpu.bin" "$BATS_TEST_TMPDIR/$prec.bin" "$([ "$prec" = tf32 ] && echo 5e-5 || echo 3e-4)"
	done
}

# auto in NCHW: conv1's weight gradient and conv2's backward pair are timed
# together as the step runs them (fused where both are the project's), and
# the choice is the least sum of what the # GPU: line prints (the pair, the
# backward-filter with the bias gradient, the pool's backward unless both
# of conv2's calls are direct); cuemu's clock is a model, so the times are
# its, but the bookkeeping is the module's own.
@test "--conv1 auto --conv2 auto in NCHW: the backward's choice is the least sum of the times the # GPU: line prints (cuemu)" {
	local line
	for c2 in auto direct; do
		run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 1 --device cuda --precision tf32 \
			--conv1 auto --conv2 "$c2" --conv-layout nchw
		assert_success
		line=$(grep '^# GPU: ' <<<"$output")
		[ -n "$line" ]
		run /usr/bin/python3 - "$c2" "$line" <<-'EOF'
		import re, sys
		c2, line = sys.argv[1], sys.argv[2]
		impl = {"cuDNN": 0, "direct": 1}
		pair = r"backward-data with conv1's weight gradient (\w+)/(\w+) ([\d.]+) ms(?: \(([^)]*)\))?"
		batches = re.findall(pair, line)
		assert len(batches) == 2, line       # batch 8 and the evaluation's 16
		wg = re.findall(r"backward-filter and bias gradient (\w+) ([\d.]+) ms \(\w+ ([\d.]+)\)", line)
		pool = re.findall(r"pool backward ([\d.]+) ms \((skipped|run)\)", line)
		for i, (d, c, t, rest) in enumerate(batches):
		    times = {(impl[d], impl[c]): float(t)}
		    for other in filter(None, rest.split(", ")):
		        m = re.fullmatch(r"(\w+)/(\w+) ([\d.]+)", other)
		        times[(impl[m[1]], impl[m[2]])] = float(m[3])
		    if c2 == "auto":
		        assert len(times) == 4, times     # every pair: conv1 and conv2 auto
		        w = {impl[wg[i][0]]: float(wg[i][1]), 1 - impl[wg[i][0]]: float(wg[i][2])}
		        p = float(pool[i][0])
		        assert (pool[i][1] == "skipped") == (impl[d] == 1 and impl[wg[i][0]] == 1), line
		        chosen = times[(impl[d], impl[c])] + w[impl[wg[i][0]]] + (0 if pool[i][1] == "skipped" else p)
		        least = min(t + w[dw] + (0 if k[0] and dw else p) for k, t in times.items() for dw in (0, 1))
		    else:
		        assert set(times) == {(1, 0), (1, 1)}, times   # conv2 direct: conv1's two
		        assert not wg and not pool, line
		        chosen, least = times[(impl[d], impl[c])], min(times.values())
		    # the times print to 0.001 ms: three of them in a sum
		    assert chosen <= least + 0.003, (i, chosen, least, line)
		print("ok")
		EOF
		assert_output ok
		[ "$c2" = auto ] || [[ "$line" == *", conv2 direct (tensor cores)"* ]]
		# the training batch's calls timed as the replay runs them, as
		# graphs; the evaluation's 16 (eager) on the stream
		[[ "$line" == *", batch 8's calls timed as CUDA graphs, NCHW, CUDA graph, backward streams auto (1 or 2: the step's graph timed both ways), programmatic launch auto (the step's graph timed with and without)" ]]
	done
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 1 --device cuda --precision tf32 \
		--conv1 auto --conv2 auto --conv-layout nchw --no-graph
	assert_success
	line=$(grep '^# GPU: ' <<<"$output")
	[[ "$line" == *", batch 8 conv1 forward "* && "$line" == *", NCHW, no graph, backward streams auto: 1 (no graph to time both ways)" ]]
	[[ "$line" != *"timed as CUDA graphs"* ]]
}

# A GPU may refuse a kernel it cannot hold (more registers or shared memory
# than it has, no image for its architecture); cuemu refuses those that
# CUEMU_FAIL_KERNELS names (conv2's implicit GEMMs, TF32's cp.async one
# among them, and its backward-filter launches).  auto's start-up timing
# then leaves those calls to cuDNN, says so once, and trains what --conv2
# cudnn trains; asked for by --conv2 direct, the failure stops the run,
# named.  A kernel that faults as it runs (CUEMU_FAULT_KERNELS) is no
# launch refusal: it stops the run.
@test "a GPU refusing the project's kernels: --conv2 (--conv1) auto trains on cuDNN there, saying why; --conv2 direct stops, naming it (cuemu)" {
	local line opts=("${SMALL[@]}" --max-steps 3 --device cuda --precision tf32 --conv1 cudnn --conv-layout nchw)
	run --separate-stderr "$CNN" "${opts[@]}" --conv2 cudnn --dump-params "$BATS_TEST_TMPDIR/cudnn.bin"
	assert_success
	CUEMU_FAIL_KERNELS=conv3_igemm_tf32_k,conv3_igemm_k,conv3_wgrad_k run --separate-stderr "$CNN" "${opts[@]}" --conv2 auto \
		--dump-params "$BATS_TEST_TMPDIR/auto.bin"
	echo "$stderr"
	assert_success
	[[ "$stderr" == *"warning: the project's kernels for conv2's forward failed to launch at start-up (conv2_tc.cu:"*"too many resources requested for launch"*"): cuDNN's calls there instead"* ]]
	# once, not per call or batch size; the failed launches themselves not as errors
	[ "$(grep -c 'warning:' <<<"$stderr")" -eq 1 ]
	! grep -E '^cnn_train: .*: conv2_tc.cu:[0-9]+: ' <<<"$stderr" || false
	line=$(grep '^# GPU: ' <<<"$output")
	[[ "$line" == *", batch 8 conv2 forward and pool cuDNN "*" ms (direct could not launch), "* ]]
	[[ "$line" == *", backward-filter and bias gradient cuDNN "*" ms (direct could not launch), "* ]]
	[[ "$line" == *", the project's kernels failed to launch here (conv2's forward: conv2_tc.cu:"*"): cuDNN there, NCHW, CUDA graph, backward streams auto (1 or 2: the step's graph timed both ways), programmatic launch auto (the step's graph timed with and without)" ]]
	# the refused calls could not run as graphs either: timed on the stream
	# (where they fell back), the rest as graphs
	[[ "$line" == *", batch 8's calls timed as CUDA graphs ("[1-9]" of "[1-9]" on the stream: no graph of them ran), "* ]]
	cmp "$BATS_TEST_TMPDIR/cudnn.bin" "$BATS_TEST_TMPDIR/auto.bin"
	CUEMU_FAIL_KERNELS=conv3_igemm_tf32_k,conv3_igemm_k,conv3_wgrad_k run --separate-stderr "$CNN" "${opts[@]}" --conv2 direct
	echo "$stderr"
	assert_failure
	grep -E '^cnn_train: .*step 0: conv2_tc.cu:[0-9]+: cudaGetLastError\(\): too many resources requested for launch \(cudaErrorLaunchOutOfResources\)$' <<<"$stderr"
	! grep -q 'warning:' <<<"$stderr" || false
	# a kernel that faults (an illegal address) leaves no context to go on
	# with: no fallback, the run stops naming the call and the fault
	CUEMU_FAULT_KERNELS=conv3_igemm_tf32_k run --separate-stderr "$CNN" "${opts[@]}" --conv2 auto
	echo "$stderr"
	assert_failure
	grep -E "^cnn_train: .*: conv2's forward, timed at start-up: conv2_tc.cu:[0-9]+: .*an illegal memory access was encountered \(cudaErrorIllegalAddress\)$" <<<"$stderr"
	! grep -q 'warning:' <<<"$stderr" || false
	# conv1's forward likewise, its weight gradient still the project's
	opts=("${SMALL[@]}" --max-steps 1 --device cuda --precision tf32 --conv2 cudnn --conv-layout nchw)
	CUEMU_FAIL_KERNELS=conv1_fwd_k run --separate-stderr "$CNN" "${opts[@]}" --conv1 auto
	echo "$stderr"
	assert_success
	[[ "$stderr" == *"warning: the project's kernels for conv1's forward failed to launch at start-up ("* ]]
	line=$(grep '^# GPU: ' <<<"$output")
	[[ "$line" == *", batch 8 conv1 forward cuDNN "*" ms (direct could not launch), weight gradient "* ]]
}

# --cuda-profile-steps A:B: cudaProfilerStart in step A, before its work,
# cudaProfilerStop in step B, after it (cuemu says each on stderr, which
# is unbuffered; cnn_train's progress line for a step follows the step).
@test "--cuda-profile-steps 2:3 brackets steps 2 and 3 with the profiler (cuemu)" {
	CUEMU_PROFILER_LOG=1 run "$CNN" "${SMALL[@]}" --max-steps 4 --log-every 1 --device cuda --precision fp32 \
		--conv1 cudnn --cuda-profile-steps 2:3
	assert_success
	run sed -En 's/^(epoch 1\/2 step [0-9]+\/8) loss .*/\1/p; /^cuemu: /p' <<<"$output"
	assert_output "epoch 1/2 step 1/8
cuemu: cudaProfilerStart
epoch 1/2 step 2/8
cuemu: cudaProfilerStop
epoch 1/2 step 3/8
epoch 1/2 step 4/8"
	refute_line --partial 'warning: --cuda-profile-steps'
}

# A range the run does not reach (8 steps here) would leave ncu's report
# empty with no word of why: cnn_train says so.
@test "--cuda-profile-steps past the run's last step is named, and one the run ends inside (cuemu)" {
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 4 --device cuda --precision fp32 \
		--conv1 cudnn --cuda-profile-steps 21:21
	assert_success
	assert_equal "$stderr" "cnn_train: warning: --cuda-profile-steps 21:21: the run ended at step 4, before the range: no step was profiled (more --epochs or --max-steps)"
	run --separate-stderr "$CNN" "${SMALL[@]}" --max-steps 4 --device cuda --precision fp32 \
		--conv1 cudnn --cuda-profile-steps 3:5
	assert_success
	assert_equal "$stderr" "cnn_train: warning: --cuda-profile-steps 3:5: the run ended at step 4, inside the range: the profiler ran on to the run's end"
}

# The captured step's graph, counted (cnn_train's "# CUDA graph of a
# training step" line and --log-json's cuda_graph) and drawn
# (--cuda-graph-dot: cudaGraphDebugDotPrint's Graphviz).  A launch-bound
# batch of 64 pays for every node: the counts are pinned, so a change that
# adds a kernel, a copy or a memset to the step says so here.  cuemu counts
# a cuDNN or cuBLAS call as one node (a GPU's may be more).
@test "the step's CUDA graph: its nodes counted and drawn, no copy or memset, two streams shorten its chain, --fc2 fused and auto (cuemu)" {
	# (cuBLAS's fc2 first: the default, --fc2 auto, takes the fused classifier
	# on cuemu's clock; one backward stream, where the default, auto, keeps
	# two on cuemu's clock; NCHW, where the default, auto, times both
	# layouts' graphs; no programmatic edge, where the default, auto, times
	# the graph with them; the last option given wins; --test-limit 8: one
	# batch size prepared at start-up; --max-steps 3: the run ends at the
	# step it captures)
	local n line opts=("${SMALL[@]}" --test-limit 8 --max-steps 3 --device cuda --precision tf32 --conv1 direct
		--conv2 direct --fc2 cublas --backward-streams 1 --conv-layout nchw --pdl off)
	local dot="$BATS_TEST_TMPDIR/step.dot" json="$BATS_TEST_TMPDIR/log.json"
	run --separate-stderr "$CNN" "${opts[@]}" --cuda-graph-dot "$dot" --log-json "$json"
	echo "$stderr"
	assert_success
	# conv1 gathering its batch, conv2 with the pool, fc1, its dropout, fc2,
	# the loss; dW4, dh, the ReLU's backward, dW3, db3, dp; the linear
	# layers' update (beside the rest: off the chain); conv2's
	# backward-filter and its sum, its backward-data with conv1's weight
	# gradient and that sum; the convolutions' update
	assert_line "# CUDA graph of a training step (batch 8): 18 nodes: 18 kernels, 0 copies, 0 memsets, 0 other; the longest chain 17"
	/usr/bin/python3 - "$json" <<-'PY'
	import json, sys
	g = json.load(open(sys.argv[1]))["cuda_graph"]
	assert g == {"batch": 8, "nodes": 18, "kernels": 18, "copies": 0, "memsets": 0, "other": 0,
	             "longest_chain": 17, "backward_streams": 1, "streams_ms": None, "conv2_auto": None,
	             "conv_layout": "nchw", "layout_ms": None, "pdl": None}, g
	PY
	# the drawing: the same 18 nodes in the step's order from conv1 (no
	# gather of its own) to the update; the linear layers' update (n12)
	# hangs off db3 (n10), their last gradient, and dp (n11), the last read
	# of their weights, and joins the convolutions' update (n17): a chain of
	# 17 and that branch
	[ "$(grep -c '\[label=' "$dot")" -eq 18 ]
	! grep -q 'label="gather"' "$dot" || false
	grep -q '^  n0 \[label="conv1_fwd_k"' "$dot"
	grep -q '^  n12 \[label="sgd_kernel"' "$dot"
	grep -q '^  n17 \[label="sgd_kernel"' "$dot"
	/usr/bin/python3 - "$dot" <<-'PY'
	import re, sys
	text = open(sys.argv[1]).read()
	edges = sorted(tuple(map(int, e)) for e in re.findall(r"^  n(\d+) -> n(\d+);", text, re.M))
	chain = [(i, i + 1) for i in range(17) if i not in (11, 12)] + [(11, 13)]
	assert edges == sorted(chain + [(10, 12), (11, 12), (12, 17)]), edges
	PY
	# the weight gradients on a second stream: as many nodes, a shorter
	# chain, the longest path through the drawing's edges (counted apart)
	run --separate-stderr "$CNN" "${opts[@]}" --backward-streams 2 --cuda-graph-dot "$dot"
	assert_success
	assert_line --regexp '^# CUDA graph of a training step \(batch 8\): 18 nodes: 18 kernels, 0 copies, 0 memsets, 0 other; the longest chain ([0-9]|1[0-6])$'
	line=$(grep '^# CUDA graph of' <<<"$output")
	/usr/bin/python3 - "$dot" "${line##* }" <<-'PY'
	import re, sys
	from functools import lru_cache
	text = open(sys.argv[1]).read()
	nodes = re.findall(r"^  n(\d+) \[label=", text, re.M)
	edges = [tuple(map(int, e)) for e in re.findall(r"^  n(\d+) -> n(\d+);", text, re.M)]
	into = {int(n): [a for a, b in edges if b == int(n)] for n in nodes}
	@lru_cache(None)
	def depth(n):
	    return 1 + max((depth(a) for a in into[n]), default=0)
	longest = max(depth(int(n)) for n in nodes)
	assert len(nodes) == 18 and longest == int(sys.argv[2]), (len(nodes), longest, sys.argv[2])
	assert len(edges) > 19, edges   # more forks and joins than one stream's
	PY
	# fc2's fused classifier: fc1's dropout, fc2's GEMM, the loss, dW4, dh, fc1's
	# ReLU backward and its bias gradient (a gemv) in one launch
	run --separate-stderr "$CNN" "${opts[@]}" --fc2 fused
	assert_success
	assert_line "# CUDA graph of a training step (batch 8): 12 nodes: 12 kernels, 0 copies, 0 memsets, 0 other; the longest chain 11"
	run --separate-stderr "$CNN" "${opts[@]}" --fc2 fused --backward-streams 2
	assert_success
	assert_line --regexp '^# CUDA graph of a training step \(batch 8\): 12 nodes: 12 kernels, 0 copies, 0 memsets, 0 other; the longest chain ([0-9]|10)$'
	# bf16's GEMMs read bf16 operands the head does not: refused, naming why
	run --separate-stderr "$CNN" "${opts[@]}" --fc2 fused --precision bf16
	assert_failure
	[[ "$stderr" == *"--fc2 fused: fc2's fused classifier computes in fp32 from fp32 operands: TF32 or fp32 (bf16 keeps cuBLAS's bf16 GEMMs: --fc2 cublas)"* ]]
	# --fc2 auto: each batch size's head the faster of the two as timed
	# (cuemu's clock: a model), said in the # GPU: line; the step's graph
	# holds the one chosen for the training batch; bf16 keeps cuBLAS's
	local fast slow pick
	run --separate-stderr "$CNN" "${opts[@]}" --fc2 auto --test-limit 16
	assert_success
	line=$(grep '^# GPU: ' <<<"$output")
	[[ "$line" =~ ", batch 8 fc2 "(fused|cuBLAS)" "([0-9.]+)" ms ("(fused|cuBLAS)" "([0-9.]+)")" ]]
	pick=${BASH_REMATCH[1]} fast=${BASH_REMATCH[2]} slow=${BASH_REMATCH[4]}
	[ "$pick" != "${BASH_REMATCH[3]}" ]
	awk -v a="$fast" -v b="$slow" 'BEGIN { exit !(a <= b) }'
	[[ "$line" == *", batch 16 fc2 "* ]]   # the evaluation's batch size, timed too
	n=$([ "$pick" = fused ] && echo 12 || echo 18)
	assert_line "# CUDA graph of a training step (batch 8): $n nodes: $n kernels, 0 copies, 0 memsets, 0 other; the longest chain $((n - 1))"
	run --separate-stderr "$CNN" "${opts[@]}" --fc2 auto --precision bf16
	assert_success
	refute_line --partial " fc2 "
	assert_line "# CUDA graph of a training step (batch 8): 18 nodes: 18 kernels, 0 copies, 0 memsets, 0 other; the longest chain 17"
	# cuDNN's convolutions, NHWC, bf16, fp32 (on cuDNN: the project's
	# tensor-core kernels are TF32 or bf16; the last option given wins): no
	# copy or memset node in any
	for v in "--conv1 cudnn --conv2 cudnn" "--conv-layout nhwc" "--precision bf16" "--precision fp32 --conv2 cudnn"; do
		run --separate-stderr "$CNN" "${opts[@]}" $v
		echo "$v: $stderr"
		assert_success
		line=$(grep '^# CUDA graph of a training step' <<<"$output")
		[[ "$line" =~ ^"# CUDA graph of a training step (batch 8): "([0-9]+)" nodes: "([0-9]+)" kernels, 0 copies, 0 memsets, 0 other; the longest chain "[0-9]+$ ]]
		[ "${BASH_REMATCH[1]}" -eq "${BASH_REMATCH[2]}" ]
	done
	# no graph: none counted, and a drawing asked for says why there is none
	run --separate-stderr "$CNN" "${opts[@]}" --no-graph --cuda-graph-dot "$dot" --log-json "$json"
	assert_success
	refute_line --partial "# CUDA graph of"
	assert_equal "$stderr" "cnn_train: warning: --cuda-graph-dot $dot: no graph was captured (--no-graph)"
	grep -q '"cuda_graph": null,' "$json"
	run --separate-stderr "$CNN" "${opts[@]}" --max-steps 2 --cuda-graph-dot "$dot"
	assert_success
	assert_equal "$stderr" "cnn_train: warning: --cuda-graph-dot $dot: no graph was captured (the step is captured at its third full batch: more --max-steps)"
	# a file it cannot write: said at start-up, before any step
	run --separate-stderr "$CNN" "${opts[@]}" --cuda-graph-dot "$BATS_TEST_TMPDIR/no/such/dir/g.dot"
	assert_failure
	assert_equal "$stderr" "cnn_train: $(hostname) rank 0: --cuda-graph-dot $BATS_TEST_TMPDIR/no/such/dir/g.dot: No such file or directory"
	! grep -q '^step ' <<<"$output" || false
}

# Two ranks over NCCL (cuemu's, over TCP: rank 0 sums the ranks' buffers in
# rank order and sends the sum back), the all-reduce of the gradients
# inside the CUDA graph, against two ranks over gloo through host memory
# (no graph): the same average, so the same bits.  With --backward-streams
# 2 the linear layers' bucket goes to NCCL from the second stream.  In
# NCHW: gloo's ranks have no graph to time the layouts in.
@test "two ranks over NCCL train what two ranks over gloo do, bit for bit, graph and two streams (cuemu)" {
	local opts=("${SMALL[@]}" --max-steps 8 --device cuda --precision fp32 --conv1 direct --conv-layout nchw)
	ranks2 gloo "$BATS_TEST_TMPDIR/gloo" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/gloo.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# GPU: cuemu .*, no graph \(gradients all-reduced through host memory\), backward streams auto: 1 \(no graph to time both ways\)$'
	ranks2 nccl "$BATS_TEST_TMPDIR/nccl" "${opts[@]}" --dump-params "$BATS_TEST_TMPDIR/nccl.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp '^# cnn_train: world 2 \(nccl\), '
	assert_line --regexp '^# GPU: cuemu .*, fp32, conv1 direct, batch 8 cuDNN: conv2 forward [A-Z0-9_]+ .*, batch 8 fc2 (fused|cuBLAS) .*, NCHW, CUDA graph, backward streams auto \(1 or 2: the step.s graph timed both ways\), programmatic launch auto \(the step.s graph timed with and without\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	cmp "$BATS_TEST_TMPDIR/gloo.bin" "$BATS_TEST_TMPDIR/nccl.bin"
	CUEMU_STREAMS=lazy ranks2 nccl "$BATS_TEST_TMPDIR/s2" "${opts[@]}" --backward-streams 2 \
		--dump-params "$BATS_TEST_TMPDIR/s2.bin"
	echo "$stderr"
	assert_success
	assert_line --regexp "^# GPU: cuemu .*, CUDA graph, weight gradients on a second stream, $PDL_AUTO\$"
	cmp "$BATS_TEST_TMPDIR/gloo.bin" "$BATS_TEST_TMPDIR/s2.bin"
	# auto: every rank replays both graphs as often, with the all-reduce in
	# them, and keeps the same one (the times summed over the ranks)
	ranks2 nccl "$BATS_TEST_TMPDIR/sa" "${opts[@]}" --backward-streams auto \
		--dump-params "$BATS_TEST_TMPDIR/sa.bin"
	echo "$stderr"
	assert_success
	# (fc2's fused classifier here: the all-reduce's branch is the longest path on
	# cuemu's clock either way, a tie, which keeps one stream)
	assert_line --regexp '^# backward streams auto \(batch 8\): [12] kept; a replay of the step took [0-9.]+ ms with 1, [0-9.]+ ms with 2 \(the least of [0-9]+ each, summed over the ranks\)$'
	assert_line --regexp '^params: identical on all 2 ranks '
	cmp "$BATS_TEST_TMPDIR/gloo.bin" "$BATS_TEST_TMPDIR/sa.bin"
}

# kill_rank1 DIR [STEP]: ranks 0 and 1 over NCCL on this machine; rank 1
# killed once rank 0 printed step STEP (10).  Rank 0's output in DIR/r0.log, its status
# in DIR/rc, the seconds from the kill to its exit in DIR/secs.  Every
# choice fixed: the start-up's timed choices are other tests', the failure
# path is this one's.
kill_rank1() {
	local d=$1 at=${2:-10} port i
	port=$(free_port)
	local opts=(--train-limit 640 --test-limit 16 --batch-size 8 --epochs 5 --progress lines --log-every 1 --device cuda
		--precision fp32 --conv1 direct --conv2 cudnn --conv-layout nchw --backward-streams 1 --fc2 cublas
		--pdl off --timeout 20)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		"$CNN" "${opts[@]}" >"$d/r1.log" 2>&1 3>&- &
	local victim=$!
	# (set -e holds in the subshell: the status is recorded either way)
	( if MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 DDP_BACKEND=nccl \
		NCCL_SOCKET_IFNAME=lo timeout 120 "$CNN" "${opts[@]}" >"$d/r0.log" 2>&1 3>&-; then echo 0 >"$d/rc"
	else echo $? >"$d/rc"; fi ) 3>&- &
	for ((i = 0; i < 900; i++)); do
		grep -q "^epoch 1/5 step $at/" "$d/r0.log" 2>/dev/null && break
		sleep 0.1
	done
	grep -q "^epoch 1/5 step $at/" "$d/r0.log" || { cat "$d/r0.log" "$d/r1.log"; false; }
	local t0=$SECONDS
	kill -KILL "$victim"
	for ((i = 0; i < 300; i++)); do
		[ -f "$d/rc" ] && break
		sleep 0.1
	done
	echo $((SECONDS - t0)) >"$d/secs"
	cat "$d/r0.log"
	[ -f "$d/rc" ]
}

# A rank killed mid-run: its peer's NCCL sees the connection close, the
# communicator's async error says so, and the survivor stops at its next
# wait (within two steps: it waits for the step before last), naming the
# dead rank.  A finished wait is not trusted on a failed communicator:
# before comm_nccl.c checked that, the survivor trained on alone (its own
# gradients as the "average") until the evaluation's all-reduce.
@test "a rank killed mid-run: the NCCL survivor stops within two steps, naming it (cuemu)" {
	local d="$BATS_TEST_TMPDIR"
	kill_rank1 "$d"
	[ "$(cat "$d/rc")" -eq 1 ]
	[ "$(cat "$d/secs")" -le 10 ]
	grep -E 'rank 0: rank 1 \([^)]*\) died; NCCL training step: remote process exited or there was a network error' "$d/r0.log"
	# the step rank 0 was at when rank 1 died, then at most two more
	local last
	last=$(sed -n 's|^epoch 1/5 step \([0-9]*\)/.*|\1|p' "$d/r0.log" | tail -1)
	echo "last step printed: $last"
	[ "$last" -le 14 ]
}

# fault_rank1 D [VAR=VALUE...]: ranks 0 and 1 over NCCL, a kernel that
# faults on rank 1 alone (it stops on its own error, leaving the store
# first); rank 0 runs under `run` with the variables given, its time in
# SECS; rank 1's output in D/r1.log, its exit status in RC1.
fault_rank1() {
	local d=$1 port t0 pid
	shift
	local opts=("${SMALL[@]}" --max-steps 4 --device cuda --precision fp32 --conv1 direct --conv-layout nchw
		--backward-streams 1 --pdl off --timeout 30)
	port=$(free_port)
	CUEMU_FAULT_KERNELS=sgd_kernel MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 \
		DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo timeout 120 "$CNN" "${opts[@]}" >"$d/r1.log" 2>&1 3>&- &
	pid=$!
	t0=$SECONDS
	run --separate-stderr env "$@" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 \
		DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo timeout 120 "$CNN" "${opts[@]}"
	SECS=$((SECONDS - t0)) RC1=0
	wait "$pid" || RC1=$?
	cat "$d/r1.log"
	echo "$stderr"
	echo "rank 0 took $SECS s; rank 1 exited $RC1"
	[ "$RC1" -eq 1 ]
	[ "$status" -eq 1 ]
	grep -E '^cnn_train: [^ ]+ rank 1: step 0: .*cudaErrorIllegalAddress' "$d/r1.log"
}

# The rank that stopped: the survivor's all-reduce fails on the closed
# connection, and it names the rank as one that left (its own output says
# why), not as dead, nor as "no rank has left".
@test "a rank that stops on its own error: the NCCL survivor names it as one that left (cuemu)" {
	fault_rank1 "$BATS_TEST_TMPDIR"
	grep -E '^cnn_train: [^ ]+ rank 0: rank 1 \([^)]+\) stopped on its own error \(its output says which\) and left; .*remote process exited or there was a network error' <<<"$stderr"
	! grep -E 'died;|no rank has left' <<<"$stderr" || false
}

# The same where NCCL cannot see it (within a node NCCL spins on the
# peer's shared memory, and a rank that stopped on its own error left the
# store cleanly, so the store lists no dead rank): the failed rank marks
# the store before it leaves, and the survivor's wait, asking the store
# every half second, aborts NCCL then instead of waiting for --timeout
# (30 s: it took 31 before the mark).
@test "a rank that stops on its own error where NCCL cannot see it: the survivor stops within seconds, naming it (cuemu)" {
	fault_rank1 "$BATS_TEST_TMPDIR" CUEMU_NCCL_SILENT=1
	[ "$SECS" -le 15 ]
	[[ $stderr == *"silent (CUEMU_NCCL_SILENT): its stream held until ncclCommAbort"* ]]
	grep -E '^cnn_train: [^ ]+ rank 0: rank 1 \([^)]+\) stopped on its own error \(its output says which\) and left; training step: a peer stopped on an error of its own \(it left the rendezvous\); the communicator aborted$' <<<"$stderr"
	! grep -E 'died;|no rank has left|not done after' <<<"$stderr" || false
}

# Within a node NCCL's kernels spin on a dead peer's shared memory and no
# error comes (cuemu's NCCL with CUEMU_NCCL_SILENT holds the stream until
# ncclCommAbort, and aborts the program on a call that would block on it):
# the survivor's wait asks the store every half second and aborts NCCL
# when it names a dead rank, rather than wait for --timeout.
@test "a rank killed where NCCL cannot see it: the survivor asks the store and stops within seconds, naming it (cuemu)" {
	local d="$BATS_TEST_TMPDIR" port t0
	local opts=(--train-limit 640 --test-limit 16 --batch-size 8 --epochs 5 --progress lines --log-every 1 --device cuda
		--precision fp32 --conv1 direct --conv2 cudnn --conv-layout nchw --backward-streams 1 --fc2 cublas --pdl off
		--timeout 30)
	port=$(free_port)
	# (rank 1 dies at its 12th all-reduce, two a step: in its 6th step)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		CUEMU_NCCL_KILL_AT=12 timeout 120 "$CNN" "${opts[@]}" >"$d/r1.log" 2>&1 3>&- &
	local pid=$!
	t0=$SECONDS
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		CUEMU_NCCL_SILENT=1 run --separate-stderr timeout 120 "$CNN" "${opts[@]}"
	local secs=$((SECONDS - t0)) rc1=0
	wait "$pid" || rc1=$?
	echo "$stderr"
	echo "rank 0 took $secs s; rank 1 exited $rc1"
	[ "$rc1" -eq 137 ]
	[ "$status" -eq 1 ]
	[ "$secs" -le 15 ]
	[[ $stderr == *"silent (CUEMU_NCCL_SILENT): its stream held until ncclCommAbort"* ]]
	grep -E '^cnn_train: [^ ]+ rank 0: rank 1 \([^)]+\) died; training step: a peer.s connection to the rendezvous closed; the communicator aborted$' <<<"$stderr"
}

# A stop signal on the GPU path: the host's step loop polls the store as on
# CPUs (the steps it enqueued; at most two ahead of the GPU's), and the
# checkpoint it keeps after the agreed step resumes bit-identically on
# cuemu.  SIGUSR1 as `srun --signal=USR1@120` sends it before the time
# limit; rank 1, stopped by another's signal, ends as by SIGTERM.
@test "SIGUSR1 on rank 0 over NCCL: both ranks stop after the same step, and the checkpoint resumes bit-identically (cuemu)" {
	local d="$BATS_TEST_TMPDIR" port n p0 p1 rc0=0 rc1=0
	# 30 steps an epoch per rank
	local opts=(--train-limit 480 --test-limit 16 --batch-size 8 --epochs 1 --progress lines --log-every 1
		--device cuda --precision fp32 --conv1 direct --conv-layout nchw --backward-streams 1 --pdl off
		--stop-every 4 --timeout 30)
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		"$CNN" "${opts[@]}" --checkpoint-dir "$d/ck" >"$d/r1.log" 2>&1 3>&- &
	p1=$!
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		"$CNN" "${opts[@]}" --checkpoint-dir "$d/ck" >"$d/r0.log" 2>&1 3>&- &
	p0=$!
	(sleep 120; kill -9 "$p0" "$p1") >/dev/null 2>&1 3>&- &
	local dog=$!
	wait_line "$d/r0.log" '^epoch 1/1 step 6/' 120
	kill -USR1 "$p0"
	wait "$p0" || rc0=$?
	wait "$p1" || rc1=$?
	kill "$dog" 2>/dev/null || true
	grep -v '^# GPU' "$d/r0.log"
	cat "$d/r1.log"
	[ "$rc0" -eq 138 ]
	[ "$rc1" -eq 143 ]
	n=$(sed -n 's/^# SIGUSR1: every rank stops after step \([0-9]*\) and rank 0 writes a checkpoint there$/\1/p' "$d/r0.log")
	[ "$n" -ge 8 ]
	[ "$n" -lt 30 ]
	[ $((n % 4)) -eq 0 ]
	grep -qxF "# stopped on SIGUSR1 after step $n (epoch 1, step $n of it): $d/ck/checkpoint.bin holds it; --resume, or the job requeued, continues from there" "$d/r0.log"
	grep -qE '^params: identical on all 2 ranks' "$d/r0.log"

	ranks2 nccl "$d/resumed" "${opts[@]}" --checkpoint-dir "$d/ck" --resume --dump-params "$d/resumed.bin"
	assert_success
	assert_line "# resumed from $d/ck/checkpoint.bin: epoch 1, step $n of it, $n steps done"
	ranks2 nccl "$d/straight" "${opts[@]}" --dump-params "$d/straight.bin"
	assert_success
	cmp "$d/resumed.bin" "$d/straight.bin"
}

# Rank 0 makes NCCL's unique id and hands it to the others through the
# store.  When it cannot (an NCCL_COMM_ID NCCL cannot parse, on rank 0
# alone), it says why under comm/failed, and rank 1 stops waiting for the
# id at once, naming rank 0's reason (it waited for --timeout before).
@test "rank 0 cannot make NCCL's unique id: rank 1 stops at once, naming its reason (cuemu)" {
	local d="$BATS_TEST_TMPDIR" port t0
	local opts=("${SMALL[@]}" --max-steps 4 --device cuda --precision fp32 --conv1 direct --conv-layout nchw
		--backward-streams 1 --timeout 30)
	port=$(free_port)
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 LOCAL_RANK=0 DDP_BACKEND=nccl \
		NCCL_SOCKET_IFNAME=lo timeout 120 "$CNN" "${opts[@]}" >"$d/r1.log" 2>&1 3>&- &
	local pid=$!
	t0=$SECONDS
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 DDP_BACKEND=nccl \
		NCCL_SOCKET_IFNAME=lo NCCL_COMM_ID=nonsense run --separate-stderr timeout 120 "$CNN" "${opts[@]}"
	local rc1=0
	wait "$pid" || rc1=$?
	echo "$stderr"
	cat "$d/r1.log"
	echo "both done after $((SECONDS - t0)) s"
	[ $((SECONDS - t0)) -le 10 ]
	[ "$status" -eq 1 ]
	[ "$rc1" -eq 1 ]
	local why='NCCL ncclGetUniqueId: invalid argument: Invalid NCCL_COMM_ID \[nonsense\], please use format: <ipv4>:<port> or \[<ipv6>\]:<port> or <hostname>:<port>'
	grep -E "^cnn_train: [^ ]+ rank 0: comm: rank 0 \([^)]+\) could not make the nccl id: $why$" <<<"$stderr"
	grep -E "^cnn_train: [^ ]+ rank 1: comm: the nccl id from rank 0: a peer failed first \(comm: rank 0 \([^)]+\) could not make the nccl id: $why\)$" "$d/r1.log"
}

# The module built under ASan and UBSan (make check's sanitizer pass; their
# runtime preloaded into cnn_train alone, which is not built with them):
# the GPU path's host code, the kernels and cuemu end to end, two ranks
# over NCCL with the graph (captured and replayed both ways: --backward-
# streams auto; in both layouts: --conv-layout auto), conv2's tensor-core
# kernels and the evaluation; then the failure path of a rank whose peer is
# killed (the communicator aborted, everything closed, the exit).  Batch 4:
# under ASan a step of batch 8 took about 5 s a rank, and the choices time
# five (33 s against 58 s alone on a 2-core VM).
@test "under ASan and UBSan: two ranks over NCCL train, and one whose peer dies exits cleanly (cuemu)" {
	local san="$REPO/build/tests-san/cuemu/cnn_train_cuda_emu.so"
	[ -f "$san" ] || skip "no sanitized cuemu module ($san): make check's sanitizer pass builds it"
	printf '#!/bin/sh\nLD_PRELOAD="%s %s" CNN_TRAIN_CUDA_MODULE="%s" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 exec "%s" "$@"\n' \
		"$(gcc -print-file-name=libasan.so)" "$(gcc -print-file-name=libubsan.so)" "$san" "$CNN" >"$BATS_TEST_TMPDIR/cnn_san"
	chmod +x "$BATS_TEST_TMPDIR/cnn_san"
	local CNN="$BATS_TEST_TMPDIR/cnn_san" d="$BATS_TEST_TMPDIR"
	ranks2 nccl "$d/ok" "${SMALL[@]}" --batch-size 4 --max-steps 3 --eval --device cuda --conv1 direct \
		--conv2 direct --backward-streams auto --conv-layout auto
	echo "$stderr"
	assert_success
	assert_line --regexp '^params: identical on all 2 ranks '
	assert_line --regexp '^# backward streams auto \(batch 4\): [12] kept; '
	assert_line --regexp '^# conv layout auto \(batch 4\): (NCHW|NHWC) kept; '
	! grep -E 'Sanitizer|runtime error' <<<"$stderr" || false
	! grep -E 'Sanitizer|runtime error' "$d/ok.r1" || false
	kill_rank1 "$d" 3
	[ "$(cat "$d/rc")" -eq 1 ]
	grep -E 'rank 1 \([^)]*\) died; NCCL training step' "$d/r0.log"
	! grep -E 'Sanitizer|runtime error' "$d/r0.log" || false
}
