#!/bin/bash
# make demo: start a 2-node local Slurm, train cnn_train across it with
# srun --ddp=gloo for one epoch of Fashion-MNIST, stop the cluster.
#   DEMO_EPOCHS=N   epochs (1)
#   DEMO_ARGS=...   more cnn_train options, e.g. "--train-limit 2048" (the
#                   test of this script, tests/bats/demo.bats, keeps it short)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cluster=tests/cluster/cluster.sh
trap '$cluster stop >/dev/null 2>&1 || true' EXIT
$cluster stop >/dev/null 2>&1 || true
$cluster start 2
epochs=${DEMO_EPOCHS:-1}
read -r -a extra <<<"${DEMO_ARGS:-}"
# The two simulated nodes share this machine's cores: one CPU per task.
cmd=(srun -N2 --ntasks-per-node=1 --cpus-per-task=1 --ddp=gloo)
progress=lines
if [ -t 1 ]; then
	progress=bar
	cmd+=(-u)   # unbuffered, so the progress bar moves
fi
echo
echo "demo: srun -N2 --ntasks-per-node=1 --ddp=gloo cnn_train --epochs $epochs"
echo "demo: (no torchrun, no MASTER_ADDR/MASTER_PORT by hand: the plugin sets them)"
echo "demo: what each task gets:"
$cluster run "${cmd[@]}" "$repo/build/bin/ddp-env" --explain 2>/dev/null \
	| grep -E '^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|GLOO_SOCKET_IFNAME|OMP_NUM_THREADS) ' | sed 's/^/  /'
echo
echo "demo: srun -N2 --ddp=gloo ddp-check -e 16M   (is the cluster ready? the checks it ran:)"
$cluster run srun -N2 --ntasks-per-node=1 --ddp=gloo "$repo/build/bin/ddp-check" -e 16M -n 5 -w 1 2>&1 \
	| grep -E '^(OK|WARN|FAIL|SKIP) |^ddp-check:|^ +16777216 ' | sed 's/^/  /'
echo
$cluster run "${cmd[@]}" "$repo/build/bin/cnn_train" --epochs "$epochs" --progress "$progress" \
	--log-every 100 ${extra[@]+"${extra[@]}"}
echo
echo "demo: the same contract runs unmodified PyTorch env:// scripts, e.g."
echo "demo:   srun -N2 --ddp=gloo python3 contrib/pytorch/train_ddp.py --epochs 1"
