#!/bin/bash
# What binding costs slurmstepd per step, the plugin's code alone (no
# Slurm, no daemons: the noise bench/launch_cost.sh cannot get below):
# hwloc's discovery, what each step did before topology_cache (the peer),
# against the kept export, and the first step of a boot, which writes it.
# Each sample a new process, the ways interleaved; prints each way's
# median, quartiles and lowest, and the ratio kept/discover.
#
#   bench/topo_step.sh                 200 rounds
#   ROUNDS=50 bench/topo_step.sh
#   tests/cluster/release.sh run 24.11 sh -c 'make -s bench && bench/topo_step.sh'
#                                      with another release's hwloc
#   EXPORT=tests/topologies/dgx-h100.xml bench/topo_step.sh
#                                      and a way "export": a task's load of that
#                                      machine's export and the plan of 8 tasks
#                                      and 8 GPUs (a GPU node's cost, here)
#
# Needs root (the kept export lives in a folder of root's) and make bench.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${ROUNDS:-200}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ROUNDS=$rounds: expected a count of rounds" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench: needs root (topology_cache is a folder of root's)" >&2; exit 2; }
bin=$repo/build/bench/topo_step
[ -x "$bin" ] || { echo "bench: $bin is not built (run make bench)" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/topo-step.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "# $(nproc) CPUs ($cpu), libhwloc $(dpkg-query -W -f '${Version}' 'libhwloc15' 2>/dev/null || echo '?'), $(date +%F)"
if [ -n "${EXPORT:-}" ]; then
	[ -r "$EXPORT" ] || { echo "bench: EXPORT=$EXPORT: not a readable file" >&2; exit 2; }
	"$bin" "$rounds" "$dir/cache" "$(realpath "$EXPORT")"
else
	"$bin" "$rounds" "$dir/cache"
fi
