#!/bin/bash
# A real multi-node Slurm on one machine, for slurm-ddp's tests and demo.
#
#   cluster.sh start [N]    start slurmctld + N slurmd (default 3), each node
#                           a network namespace with its own address
#   cluster.sh stop         stop everything this harness started, remove namespaces
#   cluster.sh status       show what is running
#   cluster.sh run CMD...   run CMD as a client (srun, sbatch, ...) inside the
#                           controller namespace, with SLURM_CONF set, as root
#                           (what an admin runs)
#   cluster.sh user CMD...  the same as the cluster's unprivileged user (what
#                           a user runs): DDP_CLUSTER_USER, made at start
#   cluster.sh node I CMD.. run CMD inside node I's network namespace
#   cluster.sh env          print the variables describing the running cluster
#
# Environment (all optional):
#   DDP_CLUSTER_DIR   run folder (default: <repo>/build/cluster)
#   DDP_CLUSTER_USER  the unprivileged user jobs are submitted as (default
#                     ddp-test: made at start where missing, uid 2000 or the
#                     next free one above, its own home under /home)
#   DDP_CLUSTER_NET   first three octets of the test /24 (default: the first of
#                     10.231.0 .. 10.231.63 that no route or address of this
#                     network namespace overlaps, so a second cluster sharing the
#                     namespace, or a route a killed run left, is not hit)
#   DDP_CLUSTER_NS    namespace name prefix (default: ddpt, or ddpt2 .. ddpt9
#                     when another checkout's cluster holds ddpt)
#   DDP_PLUGIN        plugin to list in plugstack.conf (default: <repo>/build/lib/spank_ddp.so)
#   DDP_PLUGIN_ARGS   more plugstack.conf arguments for the plugin (key=value ...)
#   DDP_FAKE_GPUS     a fake_gpus.conf for slurmd: Slurm's own stand-in for
#                     AutoDetect (each GPU's device file, Links, flags), so
#                     slurmd orders its GPU list as AutoDetect=nvml would
#   DDP_CLUSTER_SHARING  NAME:COUNT, shard:8 or mps:400: each node also has
#                     COUNT of that GPU-sharing GRES over its 4 fake GPUs
#   DDP_CLUSTER_IPV6  if set, an IPv6 network beside the IPv4 one that Slurm
#                     keeps using (NodeAddr): each node also has
#                     DDP_CLUSTER_NET6::(10+I)/64 (default fd00:ddb:231, or
#                     fd00:ddb:231:K beside 10.231.K) on its
#                     veth, and every /etc/hosts names the nodes by their IPv6
#                     addresses only, so names resolve as on an IPv6-only network
#   DDP_CLUSTER_TASKPLUGIN  slurm.conf TaskPlugin (default task/none; task/affinity
#                     binds each task's CPUs itself, as most sites do; with
#                     task/cgroup, cgroup.conf ConstrainCores=yes on cgroup v1)
#   DDP_CLUSTER_SLURMD_ENV  K=V ... in slurmd's environment, which each
#                     slurmstepd inherits (what a site puts in a systemd
#                     drop-in's Environment=, e.g. HWLOC_PLUGINS_BLACKLIST)
#   DDP_CLUSTER_SLURMD_DEBUG  slurm.conf SlurmdDebug (default info; debug has
#                     the plugin's time in each slurmstepd hook of a --ddp step)
#   DDP_CLUSTER_CONSTRAIN_DEVICES  if set (with task/cgroup), ConstrainDevices=yes:
#                     the GPUs' files are $RUN/dev/nvidia0-3, char devices 195:0-3
#                     (no driver behind them), which each step's devices
#                     cgroup allows or denies
#   DDP_CLUSTER_VALGRIND  if set, slurmd of node1 and the slurmstepd it starts
#                     run under valgrind (slow); logs in <run>/log/valgrind.*
#
# The plugin reads <run>/etc/ddp.yaml (a copy of conf/ddp.yaml; tests edit it:
# srun and slurmstepd read it afresh for every step).
#
# Layout: namespace <ns>-ctl holds bridge br0 (.2) and runs slurmctld; node I is
# namespace <ns>-nI with a veth "enpIs0" (.10+I) on that bridge, a decoy docker0
# (172.17.0.1/16, a bridge with no ports) and runs `slurmd -D -N nodeI`.  Every node's
# /etc/hosts is Debian-style: its own name on 127.0.1.1, the others on their test
# addresses.  In the root namespace the test /24 is routed `unreachable` while
# the cluster exists, so no test traffic can leave these namespaces.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
RUN=${DDP_CLUSTER_DIR:-$repo/build/cluster}
PLUGIN=${DDP_PLUGIN:-$repo/build/lib/spank_ddp.so}
IPV6=${DDP_CLUSTER_IPV6:-}

# use_net A.B.C [NET6]: the cluster's networks.  The ones a running cluster
# chose, and its namespaces' prefix, are in <run>/net, for every later
# command (run, node, stop, env, tests); stop removes it.
use_net() {
	NET=$1
	NET6=${2:-${DDP_CLUSTER_NET6:-fd00:ddb:231}}
	SUBNET="$NET.0/24"
	CTL_IP="$NET.2"
	SUBNET6="$NET6::/64"
}
if [ -n "${DDP_CLUSTER_NS:-}" ]; then
	NS=$DDP_CLUSTER_NS
elif [ -s "$RUN/net" ] && grep -q '^NS=' "$RUN/net"; then
	NS=$(sed -n 's/^NS=//p' "$RUN/net")
else
	NS=ddpt
fi
if [ -n "${DDP_CLUSTER_NET:-}" ]; then
	use_net "$DDP_CLUSTER_NET"
elif [ -s "$RUN/net" ]; then
	use_net "$(sed -n 's/^NET=//p' "$RUN/net")" "$(sed -n 's/^NET6=//p' "$RUN/net")"
else
	use_net 10.231.0
fi

# net_free A.B.C [NET6]: nothing in this network namespace routes or holds an
# address inside A.B.C.0/24 (nor, with IPv6, NET6::/64)
net_free() {
	[ -z "$(ip -4 route show table all root "$1.0/24" 2>/dev/null)" ] &&
		[ -z "$(ip -4 addr show to "$1.0/24" 2>/dev/null)" ] || return 1
	[ -z "$IPV6" ] && return 0
	[ -z "$(ip -6 route show table all root "$2::/64" 2>/dev/null)" ] &&
		[ -z "$(ip -6 addr show to "$2::/64" 2>/dev/null)" ]
}

# claim_net A.B.C [NET6]: take the test /24 (and, with IPv6, NET6::/64)
# by routing it `unreachable` in the root namespace, recorded in
# <run>/route for stop; 1 where a route is there already: two clusters
# starting at once never take the same network
claim_net() {
	ip route add unreachable "$1.0/24" 2>/dev/null || return 1
	echo "$1.0/24" >>"$RUN/route"
	[ -z "$IPV6" ] && return 0
	if ! ip -6 route add unreachable "$2::/64" 2>/dev/null; then
		ip route del unreachable "$1.0/24" 2>/dev/null || true
		sed -i '$d' "$RUN/route"
		return 1
	fi
	echo "$2::/64" >>"$RUN/route"
}

# pick_net: DDP_CLUSTER_NET as given, else the first free 10.231.K, claimed
pick_net() {
	local k net6 taken=
	if [ -n "${DDP_CLUSTER_NET:-}" ]; then
		use_net "$DDP_CLUSTER_NET"
		claim_net "$NET" "$NET6" ||
			die "cannot add 'unreachable $SUBNET'${IPV6:+ or '$SUBNET6'} route in the root namespace (already a cluster? try: $0 stop)"
	else
		for k in $(seq 0 63); do
			net6=${DDP_CLUSTER_NET6:-fd00:ddb:231}
			[ -n "${DDP_CLUSTER_NET6:-}" ] || [ "$k" = 0 ] || net6="fd00:ddb:231:$k"
			if net_free "10.231.$k" "$net6" && claim_net "10.231.$k" "$net6"; then
				# name every network skipped, not only the first
				case $k in
				0) ;;
				1) log "$taken is in use in this network namespace (another cluster, or a route a killed run left): using 10.231.$k.0/24" ;;
				*) log "$taken are in use in this network namespace (other clusters, or routes killed runs left): using 10.231.$k.0/24" ;;
				esac
				use_net "10.231.$k" "$net6"
				break
			fi
			taken="${taken:+$taken, }10.231.$k.0/24"
			[ "$k" != 63 ] || die "no free test network: 10.231.0.0/24 to 10.231.63.0/24 all overlap a route or address here (see: ip route show table all); set DDP_CLUSTER_NET"
		done
	fi
	printf 'NET=%s\nNET6=%s\nNS=%s\n' "$NET" "$NET6" "$NS" >"$RUN/net"
}

STARTING=
die() {
	echo "cluster: $*" >&2
	# a half-started cluster is stopped, never left behind
	if [ -n "$STARTING" ]; then STARTING=; cmd_stop; fi
	exit 1
}
log() { echo "cluster: $*" >&2; }

node_ip() { echo "$NET.$((10 + $1))"; }
node_ip6() { echo "$NET6::$((10 + $1))"; }
node_if() { echo "enp${1}s0"; }

nsexec() { # nsexec NS CMD...: run in the network namespace, keeping /sys and cgroups
	local ns=$1; shift
	nsenter --net="/run/netns/$ns" "$@"
}

# start_daemon NS HOSTNAME HOSTSFILE PIDNAME CMD...
start_daemon() {
	local ns=$1 host=$2 hosts=$3 name=$4; shift 4
	setsid nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
		sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts || exit 1; shift 2; exec "$@"' \
		sh "$host" "$hosts" "$@" \
		</dev/null >>"$RUN/log/$name.out" 2>&1 &
	echo $! >"$RUN/pids/$name"
}

write_conf() {
	local n=$1 i share_type='' share_node=''
	case ${DDP_CLUSTER_SHARING:-} in
	"") ;;
	shard:[0-9]*|mps:[0-9]*)
		share_type=,${DDP_CLUSTER_SHARING%%:*} share_node=,$DDP_CLUSTER_SHARING ;;
	*) die "DDP_CLUSTER_SHARING=$DDP_CLUSTER_SHARING: expected shard:COUNT or mps:COUNT" ;;
	esac
	mkdir -p "$RUN/etc" "$RUN/state" "$RUN/spool" "$RUN/log" "$RUN/dev" "$RUN/pids" "$RUN/munge"
	for i in 0 1 2 3; do
		[ -e "$RUN/dev/fakegpu$i" ] || mknod "$RUN/dev/fakegpu$i" c 1 3
	done
	# ConstrainDevices: the GPUs' files must be devices of their own, which
	# the step's devices cgroup allows or denies: NVIDIA's numbers (major
	# 195, minor I), with no driver here, so opening an allowed one fails
	# with ENXIO and a denied one with EPERM
	local gpufile=$RUN/dev/fakegpu
	if [ -n "${DDP_CLUSTER_CONSTRAIN_DEVICES:-}" ]; then
		gpufile=$RUN/dev/nvidia
		for i in 0 1 2 3; do
			[ -e "$gpufile$i" ] || mknod "$gpufile$i" c 195 "$i"
		done
	fi
	case ${DDP_CLUSTER_SLURMD_DEBUG:-info} in
	quiet | fatal | error | info | verbose | debug | debug[2-5]) ;;
	*) die "DDP_CLUSTER_SLURMD_DEBUG=$DDP_CLUSTER_SLURMD_DEBUG: expected a SlurmdDebug level (info, verbose, debug, debug2..debug5, error, fatal, quiet)" ;;
	esac
	# SchedulerParameters: never a word containing "defer" (slurmctld
	# looks for that substring: "defer_batch=0" deferred every job to the
	# next backfill pass, ~0.8 s per srun); bf_interval=1 for the few jobs
	# that must wait (a busy node, a requeue)
	cat >"$RUN/etc/slurm.conf" <<CONF
# Generated by tests/cluster/cluster.sh -- a throwaway test cluster.
ClusterName=ddptest
SlurmctldHost=ctl($CTL_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$RUN/munge/munge.sock
StateSaveLocation=$RUN/state
SlurmdSpoolDir=$RUN/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.%n.pid
SlurmctldLogFile=$RUN/log/slurmctld.log
SlurmdLogFile=$RUN/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=${DDP_CLUSTER_SLURMD_DEBUG:-info}
ProctrackType=proctrack/linuxproc
TaskPlugin=${DDP_CLUSTER_TASKPLUGIN:-task/none}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu$share_type
MailProg=/bin/true
PlugStackConfig=$RUN/etc/plugstack.conf
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=30
SchedulerParameters=bf_interval=1
CONF
	for i in $(seq 1 "$n"); do
		echo "NodeName=node$i NodeAddr=$(node_ip "$i") NodeHostname=node$i CPUs=4 RealMemory=1000 Gres=gpu:4$share_node State=UNKNOWN" >>"$RUN/etc/slurm.conf"
	done
	echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$RUN/etc/slurm.conf"
	{
		echo "AutoDetect=off"
		echo "NodeName=node[1-$n] Name=gpu File=${gpufile}[0-3]"
		[ -z "$share_node" ] ||
			echo "NodeName=node[1-$n] Name=${DDP_CLUSTER_SHARING%%:*} Count=${DDP_CLUSTER_SHARING#*:} File=${gpufile}[0-3]"
	} >"$RUN/etc/gres.conf"
	# task/cgroup: each step confined to its cpuset (ConstrainCores), as
	# sites run it; cgroup v1 (cgroup/v2 needs slurmd under systemd).  slurmd
	# makes <hierarchy>/slurm_nodeI (Debian's build names it per node).
	rm -f "$RUN/etc/cgroup.conf"
	case ${DDP_CLUSTER_TASKPLUGIN:-} in
	*task/cgroup*)
		[ -w /sys/fs/cgroup/cpuset/cgroup.procs ] ||
			die "DDP_CLUSTER_TASKPLUGIN=$DDP_CLUSTER_TASKPLUGIN needs cgroup v1's cpuset hierarchy at /sys/fs/cgroup/cpuset"
		# Slurm names a node's cgroups slurm_<node name> (not configurable),
		# and every test cluster's nodes are node1..N: another checkout's
		# task/cgroup cluster on this machine would share them (and its job
		# ids), so refuse while one holds processes; a stopped or killed
		# one's empty cgroups are removed, leaves first
		for i in $(seq 1 "$n"); do
			for f in /sys/fs/cgroup/*/slurm_node$i; do
				[ -d "$f" ] || continue
				if find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null | grep -q .; then
					die "$f holds processes: another task/cgroup test cluster runs on this machine (Slurm names a node's cgroups after it, node$i in every test cluster); stop it first"
				fi
				find "$f" -depth -type d -exec rmdir {} + 2>/dev/null || true
			done
		done
		[ -z "${DDP_CLUSTER_CONSTRAIN_DEVICES:-}" ] || [ -w /sys/fs/cgroup/devices/cgroup.procs ] ||
			die "DDP_CLUSTER_CONSTRAIN_DEVICES needs cgroup v1's devices hierarchy at /sys/fs/cgroup/devices"
		printf 'CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainDevices=%s\nConstrainRAMSpace=no\n' \
			"$([ -n "${DDP_CLUSTER_CONSTRAIN_DEVICES:-}" ] && echo yes || echo no)" >"$RUN/etc/cgroup.conf" ;;
	*)
		[ -z "${DDP_CLUSTER_CONSTRAIN_DEVICES:-}" ] ||
			die "DDP_CLUSTER_CONSTRAIN_DEVICES needs DDP_CLUSTER_TASKPLUGIN=task/cgroup" ;;
	esac
	if [ -n "${DDP_FAKE_GPUS:-}" ]; then cp "$DDP_FAKE_GPUS" "$RUN/etc/fake_gpus.conf"; else rm -f "$RUN/etc/fake_gpus.conf"; fi
	{
		echo "# Generated by tests/cluster/cluster.sh"
		# the topology kept in this run folder, never this machine's /run
		[ -z "$PLUGIN" ] || echo "required $PLUGIN config=$RUN/etc/ddp.yaml config_cache=$RUN/config-cache topology_cache=$RUN/topology-cache ${DDP_PLUGIN_ARGS:-}"
	} >"$RUN/etc/plugstack.conf"
	cp "$repo/conf/ddp.yaml" "$RUN/etc/ddp.yaml"

	# Debian-style hosts files: the node's own name on 127.0.1.1 (the classic trap).
	# The clients (srun, sbatch, salloc) run in the controller's namespace
	# under this machine's name, which srun hands slurmctld and slurmd as
	# the host to answer it at from Slurm 24.11 on: it is the controller's
	# address here (unresolved, each answer waited out the resolver's
	# retries, 8 s and more)
	local self j client
	client=$(hostname)
	case $client in localhost|ctl|node[0-9]*) client= ;; esac
	for self in ctl $(seq 1 "$n"); do
		{
			echo "127.0.0.1 localhost"
			echo "::1 localhost ip6-localhost ip6-loopback"
			if [ "$self" = ctl ]; then echo "127.0.1.1 ctl"; else echo "$CTL_IP ctl"; fi
			[ -z "$client" ] || echo "$CTL_IP $client"
			for j in $(seq 1 "$n"); do
				if [ -n "$IPV6" ]; then echo "$(node_ip6 "$j") node$j"
				elif [ "$self" = "$j" ]; then echo "127.0.1.1 node$j"
				else echo "$(node_ip "$j") node$j"; fi
			done
		} >"$RUN/etc/hosts.$self"
	done
}

start_munge() {
	if [ ! -s "$RUN/munge/munge.key" ]; then
		dd if=/dev/urandom of="$RUN/munge/munge.key" bs=1024 count=1 status=none
	fi
	# a site's /run/munge: any user's process reaches the socket (a task
	# that asks the controller as its user, e.g. ddp-check's KillWait), the
	# key is root's alone
	chmod 755 "$RUN/munge"; chmod 600 "$RUN/munge/munge.key"
	setsid munged -F --force --socket="$RUN/munge/munge.sock" --key-file="$RUN/munge/munge.key" \
		--pid-file="$RUN/munge/munged.pid" --log-file="$RUN/log/munged.log" \
		--seed-file="$RUN/munge/seed" </dev/null >>"$RUN/log/munged.out" 2>&1 &
	echo $! >"$RUN/pids/munged"
	for _ in $(seq 1 100); do [ -S "$RUN/munge/munge.sock" ] && return 0; sleep 0.05; done
	die "munged did not create its socket; see $RUN/log/munged.log"
}

make_network() {
	local n=$1 i ns
	# (the routes and $NS-ctl: claimed by pick_net and claim_ns)
	nsexec "$NS-ctl" ip link set lo up
	nsexec "$NS-ctl" ip link add br0 type bridge
	nsexec "$NS-ctl" ip addr add "$CTL_IP/24" dev br0
	[ -z "$IPV6" ] || nsexec "$NS-ctl" ip addr add "$NET6::2/64" dev br0 nodad
	nsexec "$NS-ctl" ip link set br0 up
	for i in $(seq 1 "$n"); do
		ns="$NS-n$i"
		ip netns add "$ns"
		nsexec "$ns" ip link set lo up
		ip link add "$NS-v$i" netns "$NS-ctl" type veth peer name "$(node_if "$i")" netns "$ns"
		nsexec "$NS-ctl" ip link set "$NS-v$i" master br0 up
		nsexec "$ns" ip addr add "$(node_ip "$i")/24" dev "$(node_if "$i")"
		# nodad: usable at once, not tentative for a second
		[ -z "$IPV6" ] || nsexec "$ns" ip addr add "$(node_ip6 "$i")/64" dev "$(node_if "$i")" nodad
		nsexec "$ns" ip link set "$(node_if "$i")" up
		# a decoy container bridge (no carrier), as on many compute nodes
		nsexec "$ns" ip link add docker0 type bridge
		nsexec "$ns" ip addr add 172.17.0.1/16 dev docker0
		nsexec "$ns" ip link set docker0 up
	done
}

wait_idle() {
	local n=$1 idle=0
	for _ in $(seq 1 300); do
		idle=$(crun sinfo -h -N -o '%T' 2>/dev/null | grep -c -E '^idle' || true)
		[ "$idle" -ge "$n" ] && return 0
		sleep 0.1
	done
	crun sinfo -N >&2 || true
	local f
	for f in "$RUN"/log/slurmctld.log "$RUN"/log/slurmd.node*.log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 5 "$f" >&2; }
	done
	die "only $idle of $n nodes became idle in 30 s; logs in $RUN/log"
}

crun() { # run a client inside the controller namespace
	SLURM_CONF="$RUN/etc/slurm.conf" nsenter --net="/run/netns/$NS-ctl" "$@"
}

TEST_USER=${DDP_CLUSTER_USER:-ddp-test}

# The unprivileged user (uid >= 1000, its own home), made where missing:
# jobs run as a real user, not only as root.
ensure_user() {
	local uid=2000
	id -u "$TEST_USER" >/dev/null 2>&1 && return 0
	while getent passwd "$uid" >/dev/null || getent group "$uid" >/dev/null; do uid=$((uid + 1)); done
	useradd --uid "$uid" --user-group --create-home --home-dir "/home/$TEST_USER" --shell /bin/bash \
		--comment "slurm-ddp test cluster user" "$TEST_USER" ||
		die "cannot make the test user $TEST_USER (useradd failed)"
}

# The checkout within the test user's reach: a folder above it that the
# user cannot pass (a clone under /root, mode 0700) is opened to pass
# through (o+x) while the cluster runs; stop closes it again.
open_path() {
	local d=$repo parts=() p
	while [ "$d" != / ]; do parts=("$d" "${parts[@]}"); d=$(dirname "$d"); done
	for p in "${parts[@]}"; do
		runuser -u "$TEST_USER" -- test -x "$p" 2>/dev/null && continue
		chmod o+x "$p" && echo "$p" >>"$RUN/opened"
	done
}

close_path() {
	local p
	[ -f "$RUN/opened" ] || return 0
	while read -r p; do [ -z "$p" ] || chmod o-x "$p" 2>/dev/null || true; done <"$RUN/opened"
	rm -f "$RUN/opened"
}

urun() { # a client as the test user: its own home and name, the cluster's SLURM_CONF
	crun runuser -u "$TEST_USER" -- env HOME="/home/$TEST_USER" "$@"
}

# claim_ns: the namespaces' prefix, claimed by making its controller's
# namespace (which fails where it exists: two clusters starting at once
# never take the same one), recorded in <run>/net for stop:
# DDP_CLUSTER_NS, else ddpt, ddpt2, ... (another checkout's: the next)
claim_ns() {
	local k=1
	if [ -n "${DDP_CLUSTER_NS:-}" ]; then
		# (not ours to stop: STARTING cleared)
		ip netns add "$NS-ctl" 2>/dev/null || { STARTING=; die "namespace $NS-ctl exists: a cluster is running (stop it with: $0 stop)"; }
	else
		NS=ddpt
		until ip netns add "$NS-ctl" 2>/dev/null; do
			[ -e "/run/netns/$NS-ctl" ] || { STARTING=; die "cannot make network namespace $NS-ctl (ip netns add)"; }
			k=$((k + 1))
			[ "$k" -le 9 ] || { STARTING=; die "namespaces ddpt-ctl to ddpt9-ctl all exist (other clusters?); set DDP_CLUSTER_NS"; }
			NS=ddpt$k
		done
		[ "$NS" = ddpt ] || log "namespace ddpt-ctl belongs to another cluster (not this run folder's): using $NS-*"
	fi
	printf 'NS=%s\n' "$NS" >"$RUN/net"
}

cmd_start() {
	local n=${1:-3} i
	[ "$(id -u)" = 0 ] || die "must run as root (network namespaces, slurmd)"
	[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "node count '$n': expected 1..64"
	# ours (this run folder records it) or the one asked for: running
	if [ -e "/run/netns/$NS-ctl" ] && { [ -n "${DDP_CLUSTER_NS:-}" ] || [ -s "$RUN/net" ]; }; then
		die "namespace $NS-ctl exists: a cluster is running (stop it with: $0 stop)"
	fi
	[ -z "$PLUGIN" ] || [ -f "$PLUGIN" ] || die "plugin $PLUGIN not built (run make first)"
	local tool
	for tool in ip nsenter unshare mount hostname munged slurmctld slurmd; do
		command -v "$tool" >/dev/null || die "$tool is missing (scripts/deps.sh installs what the test cluster needs)"
	done
	rm -rf "$RUN"
	mkdir -p "$RUN"
	STARTING=1
	echo "$n" >"$RUN/nodes"
	claim_ns
	pick_net
	write_conf "$n"
	make_network "$n"
	ensure_user
	open_path
	start_munge
	local conf="$RUN/etc/slurm.conf" slurmd
	# by its absolute path: from 24.11 slurmd re-executes itself to run
	# scripts, and takes /proc/self/exe for itself otherwise (valgrind's,
	# under DDP_CLUSTER_VALGRIND: "Unable to reliably execute")
	slurmd=$(command -v slurmd)
	local senv=() kv
	read -ra senv <<<"${DDP_CLUSTER_SLURMD_ENV:-}"
	for kv in "${senv[@]}"; do
		[[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*$ ]] ||
			die "DDP_CLUSTER_SLURMD_ENV: '$kv': expected NAME=VALUE words"
	done
	start_daemon "$NS-ctl" ctl "$RUN/etc/hosts.ctl" slurmctld slurmctld -D -i -f "$conf"
	for i in $(seq 1 "$n"); do
		mkdir -p "$RUN/spool/node$i"
		if [ "$i" = 1 ] && [ -n "${DDP_CLUSTER_VALGRIND:-}" ]; then
			start_daemon "$NS-n$i" "node$i" "$RUN/etc/hosts.$i" "slurmd.node$i" \
				env "${senv[@]}" valgrind --trace-children=yes \
				--trace-children-skip="/usr/bin/*,/bin/*,/usr/local/*,$repo/*" \
				--leak-check=full --num-callers=30 --log-file="$RUN/log/valgrind.node$i.%p" \
				"$slurmd" -D -N "node$i" -f "$conf"
		else
			start_daemon "$NS-n$i" "node$i" "$RUN/etc/hosts.$i" "slurmd.node$i" \
				env "${senv[@]}" "$slurmd" -D -N "node$i" -f "$conf"
		fi
	done
	wait_idle "$n"
	STARTING=
	log "up: $n nodes on $SUBNET${IPV6:+ and $SUBNET6}, run folder $RUN"
}

cmd_stop() {
	local f pid ns nss=()
	# the namespaces are this run folder's only where <run>/net names
	# their prefix (written before the first is made, removed last; a
	# killed run leaves it) or DDP_CLUSTER_NS does: without either, ddpt-*
	# belong to another checkout's cluster, which stop leaves alone
	if [ -n "${DDP_CLUSTER_NS:-}" ] || [ -s "$RUN/net" ]; then
		mapfile -t nss < <(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NS-(ctl|n[0-9]+)$" || true)
	fi
	if [ -d "$RUN/pids" ]; then
		for f in "$RUN"/pids/*; do
			[ -e "$f" ] || continue
			pid=$(cat "$f"); kill -TERM "$pid" 2>/dev/null || true
		done
	fi
	for ns in ${nss[@]+"${nss[@]}"}; do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
	done
	[ "${#nss[@]}" -eq 0 ] || sleep 0.3
	for ns in ${nss[@]+"${nss[@]}"}; do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
	if [ -d "$RUN/pids" ]; then
		for f in "$RUN"/pids/*; do
			[ -e "$f" ] || continue
			pid=$(cat "$f"); kill -KILL "$pid" 2>/dev/null || true; rm -f "$f"
		done
	fi
	if [ -f "$RUN/etc/cgroup.conf" ]; then
		# the cgroups our slurmds made (their tasks are gone): leaves first
		for f in /sys/fs/cgroup/*/slurm_node[0-9]*; do
			[ -d "$f" ] && [ -n "$(grep -l "^NodeName=${f##*/slurm_} " "$RUN/etc/slurm.conf" 2>/dev/null)" ] &&
				find "$f" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done
	fi
	if [ -f "$RUN/route" ]; then
		while read -r f; do
			[ -z "$f" ] || ip route del unreachable "$f" 2>/dev/null || true
		done <"$RUN/route"
		rm -f "$RUN/route"
	fi
	close_path
	rm -f "$RUN/net"
	log "stopped"
}

# ours: a cluster this run folder started (<run>/net, kept until stop) or
# the one DDP_CLUSTER_NS names.  Without either, the default prefix's
# namespaces are another checkout's: run and node would reach its controller
# with this folder's stale slurm.conf and munge key.
need_cluster() {
	[ -n "${DDP_CLUSTER_NS:-}" ] || [ -s "$RUN/net" ] ||
		die "no cluster started in run folder $RUN (start one with: $0 start)"
	[ -e "/run/netns/$NS-ctl" ] ||
		die "namespace $NS-ctl of run folder $RUN is gone (killed?): $0 stop, then $0 start"
}

case "${1:-}" in
start) shift; cmd_start "$@" ;;
stop) cmd_stop ;;
status)
	if [ -z "${DDP_CLUSTER_NS:-}" ] && [ ! -s "$RUN/net" ]; then
		echo "no cluster started in run folder $RUN"
	else
		ip netns list | grep -E "^$NS-" || echo "no namespaces"
		[ -e "/run/netns/$NS-ctl" ] && crun sinfo -N || true
	fi ;;
run) shift; need_cluster; crun "$@" ;;
user) shift; need_cluster; urun "$@" ;;
node)
	shift
	[ "$#" -ge 2 ] && [[ "$1" =~ ^[0-9]+$ ]] || die "node: expected a node number and a command, got '$*'"
	i=$1; shift; need_cluster
	[ -e "/run/netns/$NS-n$i" ] || die "node $i: no namespace $NS-n$i (nodes: $(cat "$RUN/nodes" 2>/dev/null || echo '?'))"
	SLURM_CONF="$RUN/etc/slurm.conf" nsexec "$NS-n$i" "$@" ;;
env)
	echo "DDP_CLUSTER_DIR=$RUN"; echo "DDP_CLUSTER_NET=$NET"; echo "DDP_CLUSTER_NS=$NS"
	[ -z "$IPV6" ] || echo "DDP_CLUSTER_NET6=$NET6"
	echo "DDP_CLUSTER_NODES=$(cat "$RUN/nodes" 2>/dev/null || echo 0)"
	echo "SLURM_CONF=$RUN/etc/slurm.conf"
	echo "DDP_CLUSTER_USER=$TEST_USER" ;;
*) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
