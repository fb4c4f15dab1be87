#!/bin/bash
# Rendezvous fan-in: libddpenv's store (one epoll thread on rank 0) against
# PyTorch's TCPStore, in one run.  For each world size, that many simulated
# ranks as threads on loopback start at once; each joins the store hosted by
# rank 0, sets its key, waits on a barrier and reads rank 0's key.  Prints
# the time from the start to the last rank's completion for both and the
# ratio.  Target for libddpenv: < 2 s at 4,096 ranks.
#
#   bench/rdzv_scale.sh                 256, 1024 and 4096 ranks
#   WORLDS="256 1024 4096 8192" bench/rdzv_scale.sh
#   TORCH=0 bench/rdzv_scale.sh         libddpenv only
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
worlds=${WORLDS:-256 1024 4096}
torch=${TORCH:-1}
make -s -C "$repo" bench >/dev/null
bin=$repo/build/bench/rdzv_scale
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '# rdzv_scale: %s, %d cores, ranks as threads on loopback, %s\n' \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" "$(date -u +%Y-%m-%d)"
[ "$torch" = 0 ] || printf '# torch %s (TCPStore)\n' "$("$py" -c 'import torch; print(torch.__version__)')"
printf '%-8s %14s %14s %8s %18s\n' ranks ddpenv_last_s torch_last_s ratio ddpenv_median_s
for w in $worlds; do
	ours=$("$bin" "$w" | tail -1)
	read -r _ last median failed <<<"$ours"
	if [ "$failed" != 0 ]; then
		echo "bench: libddpenv: $failed of $w ranks failed" >&2
		exit 1
	fi
	tl=- ratio=-
	if [ "$torch" != 0 ]; then
		theirs=$("$py" "$repo/bench/rdzv_torch.py" "$w" </dev/null 2>"$tmp/torch.err" | tail -1) || true
		read -r tw tl _ tfailed <<<"$theirs"
		if [ "$tw" != "$w" ]; then
			echo "bench: TCPStore with $w ranks failed: $(grep -m1 -iE 'error|what' "$tmp/torch.err")" >&2
			tl=failed
		elif [ "$tfailed" != 0 ]; then
			echo "bench: TCPStore: $tfailed of $w ranks failed: $(grep -m1 '^rdzv_torch' "$tmp/torch.err")" >&2
			tl=failed
		else
			ratio=$(awk -v a="$last" -v b="$tl" 'BEGIN { printf "%.1fx", b / a }')
		fi
	fi
	printf '%-8s %14s %14s %8s %18s\n' "$w" "$last" "$tl" "$ratio" "$median"
done
