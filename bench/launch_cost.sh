#!/bin/bash
# What --ddp adds to a step's launch: on the test cluster (2 nodes), the
# same step with and without --ddp, in pairs, the order inside each pair
# alternating, ROUNDS pairs per variant.  The peer is plain srun.  Prints
# each variant's median launch, and the median of the paired differences
# with its 95% confidence interval (distribution-free: order statistics of
# the differences) and its quartiles: what --ddp costs a step, against the
# noise of two 2-core machines' worth of daemons beside it.  Target: under
# 2 ms with binding on; a line per variant says whether the interval shows
# it under, above, or does not resolve it (then more ROUNDS narrow it).
#
#   bench/launch_cost.sh                  20 rounds, srun -N2 --ntasks-per-node=2 true
#   ROUNDS=50 bench/launch_cost.sh
#   NODES=1 bench/launch_cost.sh          the step on one node of the two
#                                         (-N1 --ntasks-per-node=2): its hooks
#                                         then wait on no other node's for
#                                         the machine's cores
#   HOOK_STEPS=100 bench/launch_cost.sh   then the plugin's time in each
#                                         slurmstepd hook over 100 --ddp steps
#                                         (50; 0: none), from slurmd's log: per
#                                         node, the step's path and the CPU of
#                                         all its hooks, every task's counted,
#                                         and each hook's page faults
#   tests/cluster/release.sh run 24.11 bench/launch_cost.sh    on another Slurm release
#   NOBIND=0 bench/launch_cost.sh         --ddp with binding only (the target's
#                                         variant), no --ddp-bind=none: twice
#                                         the pairs of it in the same time
#   SECRET=1 bench/launch_cost.sh         with the site's rdzv_secret set (a
#                                         root-only file, as docs/security.md
#                                         asks): each step derives its token
#   INSTALLED=1 bench/launch_cost.sh      against a cluster without the plugin:
#                                         plain srun with the plugin listed in
#                                         plugstack.conf (what installing it
#                                         costs a step that does not use it:
#                                         srun and each slurmstepd load it) and
#                                         --ddp=gloo, each paired with plain
#                                         srun with no plugin listed (the file
#                                         swapped before each launch: srun and
#                                         slurmstepd read it at every step)
#   DDP_CLUSTER_SLURMD_ENV=HWLOC_PLUGINS_BLACKLIST=... bench/launch_cost.sh
#                                         slurmd (and so slurmstepd) with that
#                                         environment (docs/admin.md)
#
# Needs root (the test cluster) and the plugin built (make).  Starts its own
# cluster in build/cluster (DDP_CLUSTER_DIR) and stops it at the end.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=$repo/tests/cluster/cluster.sh
rounds=${ROUNDS:-20}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ROUNDS=$rounds: expected a count of pairs" >&2; exit 2; }
nodes=${NODES:-2}
[[ "$nodes" =~ ^[12]$ ]] || { echo "bench: NODES=$nodes: expected 1 or 2 (the test cluster's nodes)" >&2; exit 2; }
hook_steps=${HOOK_STEPS:-50}
[[ "$hook_steps" =~ ^[0-9]+$ ]] || { echo "bench: HOOK_STEPS=$hook_steps: expected a count of steps (0: none)" >&2; exit 2; }
nobind=${NOBIND:-1}
[[ "$nobind" =~ ^[01]$ ]] || { echo "bench: NOBIND=$nobind: expected 1 (--ddp-bind=none measured too) or 0 (not)" >&2; exit 2; }
secret=${SECRET:-0}
[[ "$secret" =~ ^[01]$ ]] || { echo "bench: SECRET=$secret: expected 0 or 1" >&2; exit 2; }
installed=${INSTALLED:-0}
[[ "$installed" =~ ^[01]$ ]] || { echo "bench: INSTALLED=$installed: expected 0 or 1" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench: needs root (the test cluster)" >&2; exit 2; }
[ -f "$repo/build/lib/spank_ddp.so" ] || { echo "bench: the plugin is not built (run make)" >&2; exit 2; }

# the variants: a name and srun's extra arguments
names=(plain ddp ddp-nobind)
args=("" "--ddp=gloo" "--ddp=gloo --ddp-bind=none")
step=(-N"$nodes" --ntasks-per-node=2 true)
measured=(1 2) # the --ddp variants measured
[ "$nobind" = 1 ] || measured=(1)
# INSTALLED=1: the baseline lists no plugin; the plugin listed, without
# and with --ddp (binding on)
stacks=(with with with)
what=("plain srun" "--ddp=gloo" "--ddp=gloo --ddp-bind=none")
if [ "$installed" = 1 ]; then
	names=(no-plugin installed ddp)
	args=("" "" "--ddp=gloo")
	stacks=(none with with)
	what=("plain srun, no plugin listed" "the plugin listed, plain srun" "the plugin listed, --ddp=gloo")
	measured=(1 2)
fi

# SECRET=1: the cluster's ddp.yaml names a root-only secret of 32 bytes
site_secret() {
	local etc
	[ "$secret" = 1 ] || return 0
	etc=$("$cluster" env | sed -n 's/^DDP_CLUSTER_DIR=//p')/etc
	head -c 32 /dev/urandom >"$etc/ddp.secret"
	chmod 600 "$etc/ddp.secret"
	sed -i "s|^rdzv_secret: .*|rdzv_secret: $etc/ddp.secret|" "$etc/ddp.yaml"
	grep -q "^rdzv_secret: $etc/ddp.secret\$" "$etc/ddp.yaml" || { echo "bench: cannot set rdzv_secret in $etc/ddp.yaml" >&2; exit 1; }
	sleep 1.1 # settled: the next step keeps its parse (config_cache)
}

"$cluster" start 2 >/dev/null
trap '"$cluster" stop >/dev/null 2>&1' EXIT
site_secret
slurm=$("$cluster" run srun --version)
etc=$("$cluster" env | sed -n 's/^DDP_CLUSTER_DIR=//p')/etc
if [ "$installed" = 1 ]; then
	cp "$etc/plugstack.conf" "$etc/plugstack.conf.with"
	echo "# no plugin (bench/launch_cost.sh INSTALLED=1)" >"$etc/plugstack.conf.none"
fi

# stack with|none: plugstack.conf as the cluster wrote it, or listing no
# plugin (renamed into place: a step reads it whole or not at all)
stack() {
	[ "$installed" = 1 ] || return 0
	cp "$etc/plugstack.conf.$1" "$etc/plugstack.conf.tmp"
	mv -f "$etc/plugstack.conf.tmp" "$etc/plugstack.conf"
}

# launch V: variant V's step's wall time, in microseconds, from srun's start to its end
launch() {
	local t0 t1
	stack "${stacks[$1]}"
	t0=${EPOCHREALTIME/./}
	# shellcheck disable=SC2086 # (the variant's arguments)
	"$cluster" run srun ${args[$1]} "${step[@]}" >/dev/null
	t1=${EPOCHREALTIME/./}
	echo $((t1 - t0))
}

# INSTALLED=1: srun reads the swapped file (slurmstepd reads the same one)
if [ "$installed" = 1 ]; then
	stack none
	! "$cluster" run srun --ddp=gloo -N1 true >/dev/null 2>&1 ||
		{ echo "bench: srun took --ddp with no plugin listed in $etc/plugstack.conf" >&2; exit 1; }
	stack with
fi
# warm-up: the first steps load the plugin's files into the page cache
for v in "${!names[@]}"; do launch "$v" >/dev/null; launch "$v" >/dev/null; done

tmp=$(mktemp -d)
trap '"$cluster" stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT
for ((r = 0; r < rounds; r++)); do
	# each round: plain, then each --ddp variant, in an order that alternates
	for v in "${measured[@]}"; do
		if ((r % 2)); then
			d=$(launch "$v"); p=$(launch 0)
		else
			p=$(launch 0); d=$(launch "$v")
		fi
		echo "$p" >>"$tmp/plain"
		echo "$d" >>"$tmp/${names[$v]}"
		echo $((d - p)) >>"$tmp/${names[$v]}.diff"
	done
done

# q FILE P: the P-th percentile (0-100, nearest rank) of FILE's numbers, in ms
q() { sort -n "$1" | awk -v p="$2" '{ a[NR] = $1 } END { i = int((NR - 1) * p / 100 + 0.5) + 1; printf "%.2f", a[i] / 1000 }'; }
# ci FILE: the 95% confidence interval of the median of FILE's numbers, in
# ms, "LO..HI": the order statistics j and k around it that hold the median
# with 95% probability whatever the distribution (the binomial's normal
# approximation, j = floor((n - 1.96 sqrt n) / 2), k = ceil(1 + (n + 1.96
# sqrt n) / 2)); the whole range when n is too small for more
ci() {
	sort -n "$1" | awk '{ a[NR] = $1 } END {
		z = 1.96 * sqrt(NR); j = int((NR - z) / 2); k = 1 + (NR + z) / 2
		k = (k == int(k)) ? k : int(k) + 1
		if (j < 1) j = 1
		if (k > NR) k = NR
		printf "%.2f..%.2f", a[j] / 1000, a[k] / 1000 }'
}
# verdict LO..HI: where the interval puts the 2 ms target
verdict() {
	awk -v r="$1" 'BEGIN { split(r, b, /\.\./)
		if (b[2] + 0 < 2) print "under 2 ms"
		else if (b[1] + 0 > 2) print "above 2 ms"
		else print "not resolved at 2 ms (the interval spans it: more ROUNDS narrow it)" }'
}

echo "# --ddp launch cost: srun ${step[*]}, $rounds pairs per variant, interleaved"
[ "$installed" = 0 ] || echo "# INSTALLED=1: each variant against ${what[0]} (plugstack.conf swapped before each launch)"
if [ -n "${DDP_CLUSTER_SLURMD_ENV:-}" ]; then
	# what the running slurmd has of it (each slurmstepd, exec'd by it,
	# inherits it; its own /proc environ is its process title's room)
	have=$(tr '\0' '\n' <"/proc/$(cat "${DDP_CLUSTER_DIR:-$repo/build/cluster}/pids/slurmd.node1")/environ")
	for kv in $DDP_CLUSTER_SLURMD_ENV; do
		grep -qxF -- "$kv" <<<"$have" || { echo "bench: slurmd lacks $kv" >&2; exit 1; }
	done
	echo "# slurmd's environment has: $DDP_CLUSTER_SLURMD_ENV"
fi
[ "$secret" = 0 ] || echo "# rdzv_secret set (SECRET=1): each step derives its token"
echo "# $slurm, $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), $(date -u +%F)"
printf '%-12s %10s %15s %16s %18s %8s\n' variant "median ms" "paired diff ms" "its 95% CI" "(q1..q3)" ratio
printf '%-12s %10s %15s %16s %18s %8s\n' "${names[0]}" "$(q "$tmp/plain" 50)" - - - "1.00"
for v in "${measured[@]}"; do
	n=${names[$v]}
	printf '%-12s %10s %15s %16s %18s %8s\n' "$n" "$(q "$tmp/$n" 50)" "$(q "$tmp/$n.diff" 50)" \
		"$(ci "$tmp/$n.diff")" "($(q "$tmp/$n.diff" 25)..$(q "$tmp/$n.diff" 75))" \
		"$(awk -v a="$(q "$tmp/$n" 50)" -v b="$(q "$tmp/plain" 50)" 'BEGIN { printf "%.3f", a / b }')"
done
for v in "${measured[@]}"; do
	n=${names[$v]}
	echo "# ${what[$v]}: what it adds to a launch, by the interval: $(verdict "$(ci "$tmp/$n.diff")")"
done

# The plugin's own time in slurmstepd, without srun's noise: the cluster
# again with SlurmdDebug=verbose, where each hook of a --ddp step logs what
# it took (spank/spank_ddp.c; at debug, Slurm's own messages in a task's
# child before the hook would change the heap the hook finds); HOOK_STEPS steps with binding.  Per node and
# step: post_opt + user_init + the slowest task's task_init (the tasks'
# children run theirs side by side).
[ "$hook_steps" -gt 0 ] || exit 0
"$cluster" stop >/dev/null 2>&1
DDP_CLUSTER_SLURMD_DEBUG=verbose "$cluster" start 2 >/dev/null
site_secret
run_dir=$("$cluster" env | sed -n 's/^DDP_CLUSTER_DIR=//p')
ddp_step() { "$cluster" run srun --ddp=gloo "${step[@]}" >/dev/null; }
ddp_step && ddp_step # warm-up
declare -A from
for f in "$run_dir"/log/slurmd.node*.log; do from[$f]=$(($(wc -l <"$f") + 1)); done
for ((i = 0; i < hook_steps; i++)); do ddp_step; done
# "[JOB.0] ddp: HOOK took MS ms, CPU ms of CPU, N page faults, V
# waits, P preemptions" -> a row per node and step: post_opt user_init
# task_init(slowest) their sum, wall time; the same in CPU time (task_init:
# the slowest task's); the node's CPU time, every task's task_init counted
# (what the node's cores spend); then, for each hook's thread (task_init:
# the slowest task's) and their sum, its page faults, its waits (it gave up
# its core: a lookup's answer, a move to the core it was bound to) and its
# preemptions (another took its core)
for f in "$run_dir"/log/slurmd.node*.log; do
	tail -n +"${from[$f]}" "$f" | awk -v node="$(basename "$f")" '
		match($0, /\[[0-9]+\.0\] .*ddp: (post_opt|user_init|task_init) took [0-9.]+ ms, [0-9.]+ ms of CPU, [0-9]+ page faults, [0-9]+ waits, [0-9]+ preemptions/) {
			n = split(substr($0, RSTART, RLENGTH), w, " ")
			k = node w[1]; hook = w[n - 14]; ms = w[n - 12] + 0; cpu = w[n - 10] + 0; seen[k] = 1
			c = hook == "post_opt" ? 1 : hook == "user_init" ? 2 : 3
			if (c == 3) { tasksc[k] += cpu; if (ms <= t[k, 3]) next }
			t[k, c] = ms; tc[k, c] = cpu; pf[k, c] = w[n - 6]; wt[k, c] = w[n - 3]; pr[k, c] = w[n - 1]
		}
		END { for (k in seen) {
			printf "%.3f %.3f %.3f %.3f", t[k, 1], t[k, 2], t[k, 3], t[k, 1] + t[k, 2] + t[k, 3]
			printf " %.3f %.3f %.3f %.3f", tc[k, 1], tc[k, 2], tc[k, 3], tc[k, 1] + tc[k, 2] + tc[k, 3]
			printf " %.3f", tc[k, 1] + tc[k, 2] + tasksc[k]
			printf " %d %d %d %d", pf[k, 1], pf[k, 2], pf[k, 3], pf[k, 1] + pf[k, 2] + pf[k, 3]
			printf " %d %d %d %d", wt[k, 1], wt[k, 2], wt[k, 3], wt[k, 1] + wt[k, 2] + wt[k, 3]
			printf " %d %d %d %d\n", pr[k, 1], pr[k, 2], pr[k, 3], pr[k, 1] + pr[k, 2] + pr[k, 3] } }'
done >"$tmp/hooks"
count=$(wc -l <"$tmp/hooks")
[ "$count" -ge "$hook_steps" ] || { echo "bench: slurmd's logs hold $count --ddp steps' hook times, expected $hook_steps or more" >&2; exit 1; }
# col N P: the P-th percentile of column N of the hooks' table, in ms
col() { awk -v c="$1" '{ print $c }' "$tmp/hooks" | sort -n | awk -v p="$2" '{ a[NR] = $1 } END { i = int((NR - 1) * p / 100 + 0.5) + 1; printf "%.3f", a[i] }'; }
echo "# the plugin's time in slurmstepd per node and step, $count node-steps (SlurmdDebug=verbose), ms:"
echo "# wall time, the CPU time of the thread that ran the hook (the wall time less its time off a core),"
echo "# and the medians of its page faults (a task's child pays for each page it writes that slurmstepd's"
echo "# memory held), its waits (it gave up its core: for a lookup's answer, to move to the core it was"
echo "# bound to) and its preemptions (another thread took its core)"
printf '%-24s %8s %8s %8s %8s %8s %8s %7s %6s %8s\n' hook median q1 q3 cpu_med cpu_q1 cpu_q3 faults waits preempts
i=1
for h in post_opt user_init "task_init (slowest task)" "the step's path"; do
	printf '%-24s %8s %8s %8s %8s %8s %8s %7.0f %6.0f %8.0f\n' "$h" "$(col $i 50)" "$(col $i 25)" "$(col $i 75)" \
		"$(col $((i + 4)) 50)" "$(col $((i + 4)) 25)" "$(col $((i + 4)) 75)" "$(col $((i + 9)) 50)" \
		"$(col $((i + 13)) 50)" "$(col $((i + 17)) 50)"
	i=$((i + 1))
done
printf '%-24s %8s %8s %8s %8s %8s %8s %7s %6s %8s\n' "the node, all its tasks" - - - "$(col 9 50)" "$(col 9 25)" "$(col 9 75)" - - -
