#!/bin/bash
# The cost of resolving the --ddp contract on one node, for steps of 2 to
# 16,384 nodes: libddpenv through ddp-env, fed the environment slurmstepd
# gives a task of the step's LAST node (the worst place in the node list),
# with the node list in Slurm's compressed form.  Prints the time per
# resolution (step facts, head address, interface, port, the task's
# variables) and the name lookups each made.  Target: < 1 ms at 16,384
# nodes and flat across sizes; one lookup per node and step with
# head_from=name/auto (the plugin resolves once per node in user_init and
# reuses it for every task), none with head_from=nodeaddr where NodeAddr is
# an address (see docs/scaling.md).
#
# The node names must resolve: the run happens in a private network and
# mount namespace (root) with a veth pair on 10.231.254.0/24 and a
# private /etc/hosts naming each list's head.  Nothing leaves that namespace.
#
#   bench/resolve_scale.sh            2000 resolutions per list
#   REPEAT=20000 bench/resolve_scale.sh
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ddpenv=${DDP_ENV:-$repo/build/bin/ddp-env}
repeat=${REPEAT:-2000}
[ -x "$ddpenv" ] || { echo "bench: $ddpenv not built (run make)" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
	echo "bench: needs root for a private network and mount namespace" >&2
	exit 2
fi

# name | node list | tasks per node | last host | nodes | head_from
lists=(
	"2|gpu[0001-0002]|4(x2)|gpu0002|2|name"
	"1024|gpu[0001-1024]|4(x1024)|gpu1024|1024|name"
	"16384|gpu[00001-16384]|4(x16384)|gpu16384|16384|name"
	"16384-mixed|a100-[0001-8000],h100-[0001-6000],gpu[1-2000,3001-3384]|4(x8000),8(x6000),4(x2384)|gpu3384|16384|name"
	"16384|gpu[00001-16384]|4(x16384)|gpu16384|16384|nodeaddr"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
	echo "127.0.0.1 localhost"
	echo "10.231.254.11 gpu0001 gpu00001 a100-0001"
} >"$tmp/hosts"
# Slurm's view for head_from=nodeaddr: NodeAddr of the head is an address
cat >"$tmp/slurm.conf" <<'EOF'
ClusterName=bench
SlurmctldHost=ctl(10.231.254.2)
NodeName=gpu00001 NodeAddr=10.231.254.11 CPUs=4
NodeName=gpu[00002-16384] CPUs=4
PartitionName=all Nodes=ALL Default=YES
EOF

cat >"$tmp/inner.sh" <<'EOF'
set -eu
ip link set lo up
ip link add ddpb0 type veth peer name ddpb1
ip addr add 10.231.254.20/24 dev ddpb0
ip link set ddpb0 up
ip link set ddpb1 up
mount --bind "$TMPD/hosts" /etc/hosts
printf '%-14s %7s %-9s %12s %14s %s\n' nodes tasks head_from us_per_res lookups_per_res head
for spec in "${LISTS[@]}"; do
	IFS='|' read -r name list tpn last n from <<<"$spec"
	tasks=$(awk -v s="$tpn" 'BEGIN { t = 0; k = split(s, a, ","); for (i = 1; i <= k; i++) {
		c = a[i]; m = 1; if (match(c, /\(x[0-9]+\)/)) { m = substr(c, RSTART + 2, RLENGTH - 3); c = substr(c, 1, RSTART - 1) }
		t += c * m } print t }')
	out=$(env -i PATH="$PATH" SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_STEP_NODELIST="$list" \
		SLURM_STEP_NUM_NODES="$n" SLURM_STEP_NUM_TASKS="$tasks" SLURM_STEP_TASKS_PER_NODE="$tpn" \
		SLURM_NODEID=$((n - 1)) SLURMD_NODENAME="$last" SLURM_PROCID=$((tasks - 1)) SLURM_LOCALID=3 \
		SLURM_CONF="$TMPD/slurm.conf" "$DDPENV" --backend=gloo --head-from="$from" --repeat="$REPEAT")
	line=$(grep '^# ' <<<"$out")
	us=$(sed -n 's/.*: \([0-9.]*\) us each.*/\1/p' <<<"$line")
	lk=$(sed -n 's/.*, \([0-9.]*\) name lookups each.*/\1/p' <<<"$line")
	head=$(sed -n 's/.*head \(.*\)$/\1/p' <<<"$line")
	rank=$(sed -n "s/^export RANK='\(.*\)'/\1/p" <<<"$out")
	addr=$(sed -n "s/^export MASTER_ADDR='\(.*\)'/\1/p" <<<"$out")
	printf '%-14s %7s %-9s %12s %14s %s -> %s (RANK %s)\n' "$name" "$tasks" "$from" "$us" "$lk" "$head" "$addr" "$rank"
done
EOF

printf '# resolve_scale: ddp-env %s, %s, %d resolutions per list, %s\n' \
	"$("$ddpenv" --version | awk '{print $2}')" \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$repeat" "$(date -u +%Y-%m-%d)"
export TMPD=$tmp DDPENV=$ddpenv REPEAT=$repeat
LISTS_STR=$(printf '%s\n' "${lists[@]}")
export LISTS_STR
unshare --net --mount --propagation private bash -c \
	'mapfile -t LISTS <<<"$LISTS_STR"; source "$TMPD/inner.sh"'
