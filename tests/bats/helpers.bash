# Shared by the Bats tests: the repo, the test cluster, bats-assert.
bats_require_minimum_version 1.5.0
load '/usr/lib/bats/bats-support/load'
load '/usr/lib/bats/bats-assert/load'

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
CLUSTER="$REPO/tests/cluster/cluster.sh"
NET=${DDP_CLUSTER_NET:-10.231.0}
REPORT="$REPO/tests/bats/task_report.sh"
export BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

node_ip() { echo "$NET.$((10 + $1))"; }

cluster_start() { "$CLUSTER" start "$1" >&3 2>&1; }
cluster_stop() { "$CLUSTER" stop >/dev/null 2>&1 || true; }

# Run a Slurm client inside the cluster (bounded).
crun() { timeout 90 "$CLUSTER" run "$@"; }

# Dump the daemons' logs when a test failed, redis-style.
dump_logs_on_failure() {
	local d=${DDP_CLUSTER_DIR:-$REPO/build/cluster}
	if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -d "$d/log" ]; then
		for f in "$d"/log/slurmctld.log "$d"/log/slurmd.node*.log; do
			[ -f "$f" ] && { echo "--- tail $f"; tail -n 15 "$f"; }
		done
	fi
}
