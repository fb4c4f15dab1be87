#!/bin/bash
# Host-to-device copy bandwidth: a process bound as the plugin binds it
# (--ddp-bind=auto: the cores and NUMA memory near its GPU) against the same
# process bound to the far socket, and unbound, in one run; prints the ratio.
#
#   bench/h2d_bind.sh [GPU_INDEX] [MIB]      (default 0, 256)
#
# Needs a GPU and the CUDA runtime (build/bench/h2d_bind is built when nvcc
# or /usr/local/cuda is present).  On a one-socket machine it says so and
# compares the plugin's binding with no binding only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${H2D_BIND:-$repo/build/bench/h2d_bind}
gpu=${1:-0}
mib=${2:-256}

# no GPU first: there the bench does not apply, built or not (a machine
# without CUDA builds no h2d_bind)
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /dev/nvidia0 ]; then
	echo "h2d_bind.sh: SKIP: no NVIDIA GPU on this machine" >&2
	exit 0
fi
if [ ! -x "$bin" ]; then
	echo "h2d_bind.sh: $bin is not built (make bench on a machine with CUDA)" >&2
	exit 2
fi

echo "# h2d_bind: host-to-device copy, pinned memory, $mib MiB, best of 20; $(date -u +%F) $(hostname)"
set +e
plugin=$("$bin" --mode=plugin --gpu="$gpu" --mib="$mib")
plugin_rc=$?
set -e
if [ "$plugin_rc" -eq 4 ]; then
	# hwloc sees no GPU here: the plugin would not bind; measure what can be
	"$bin" --mode=none --gpu="$gpu" --mib="$mib"
	echo "# hwloc sees no PCI GPU on this machine: the plugin leaves the task unbound; unbound only"
	exit 0
fi
[ "$plugin_rc" -eq 0 ] || exit "$plugin_rc"
none=$("$bin" --mode=none --gpu="$gpu" --mib="$mib")
set +e
far=$("$bin" --mode=far --gpu="$gpu" --mib="$mib")
far_rc=$?
set -e
echo "$plugin"
echo "$none"
echo "$far"
bw() { sed -n 's/.*h2d_GBps=\([0-9.]*\).*/\1/p' <<<"$1"; }
if [ "$far_rc" -eq 0 ]; then
	awk -v p="$(bw "$plugin")" -v f="$(bw "$far")" -v n="$(bw "$none")" 'BEGIN {
		printf "# plugin binding / far socket: %.2fx   plugin / unbound: %.2fx\n", p / f, p / n }'
elif [ "$far_rc" -eq 3 ]; then
	awk -v p="$(bw "$plugin")" -v n="$(bw "$none")" 'BEGIN {
		printf "# one NUMA node near the GPU, no far socket: plugin / unbound: %.2fx\n", p / n }'
else
	exit "$far_rc"
fi
