#!/bin/bash
# make demo: start a 2-node local Slurm, train across it with srun --ddp, stop it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cluster=tests/cluster/cluster.sh
trap '$cluster stop >/dev/null 2>&1 || true' EXIT
$cluster stop >/dev/null 2>&1 || true
$cluster start 2
echo
echo "demo: srun -N2 --ntasks-per-node=1 --ddp=gloo python3 contrib/pytorch/train_ddp.py --epochs 1"
echo "demo: (no torchrun, no MASTER_ADDR/MASTER_PORT by hand; the plugin sets them)"
echo "demo: what each task gets:"
$cluster run srun -N2 --ntasks-per-node=1 --ddp=gloo "$repo/build/bin/ddp-env" --explain 2>/dev/null \
	| grep -E '^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|GLOO_SOCKET_IFNAME) ' | sed 's/^/  /'
echo
$cluster run srun -N2 --ntasks-per-node=1 --ddp=gloo \
	/usr/bin/python3 "$repo/contrib/pytorch/train_ddp.py" --epochs "${DEMO_EPOCHS:-1}"
