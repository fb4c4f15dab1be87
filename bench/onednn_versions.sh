#!/bin/bash
# cnn_train on oneDNN 2.x and 3.x, on this machine's CPUs, in one run: the
# same source built on this machine (Debian 12: oneDNN 2.6) and in another
# release's Debian root (Debian 13: oneDNN 3.7; tests/cluster/release.sh),
# the same data, batch size, thread count and number of steps, REPEATS
# runs of each, interleaved (the order alternating).  Prints each one's
# median images/s with its lowest and highest, and the ratio.
#
#   bench/onednn_versions.sh                  200 steps, 5 runs each, against 24.11's root
#   STEPS=500 REPEATS=7 RELEASE=26.05 bench/onednn_versions.sh
#
# Needs root (the release's root) and both builds: make, and
# tests/cluster/release.sh run RELEASE make.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
release=${RELEASE:-24.11}
steps=${STEPS:-200}
repeats=${REPEATS:-5}
batch=${BATCH:-64}
threads=${THREADS:-$(nproc)}
for v in steps repeats batch threads; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "bench: ${v^^}=${!v}: expected a positive count" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "bench: needs root (the release's Debian root)" >&2; exit 2; }
[ -x "$repo/build/bin/cnn_train" ] || { echo "bench: build/bin/cnn_train not built (run make)" >&2; exit 2; }
[ -x "$repo/build/release-$release/bin/cnn_train" ] ||
	{ echo "bench: no cnn_train built for $release (run: tests/cluster/release.sh run $release make)" >&2; exit 2; }

args=(--batch-size "$batch" --threads "$threads" --max-steps "$steps" --progress lines --log-every 100000)
# one run: images/s from cnn_train's last line ("done: N steps, X images/s ...")
here() { OMP_NUM_THREADS=$threads "$repo/build/bin/cnn_train" "${args[@]}" 2>&1 | sed -n 's/^done: .* \([0-9.]*\) images\/s .*/\1/p'; }
there() {
	"$repo/tests/cluster/release.sh" run "$release" env OMP_NUM_THREADS="$threads" build/bin/cnn_train "${args[@]}" 2>&1 |
		sed -n 's/^done: .* \([0-9.]*\) images\/s .*/\1/p'
}
dnnl() { sed -n 's/^#define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$1" | paste -sd.; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
there >/dev/null # the root's files into the page cache
for ((r = 0; r < repeats; r++)); do
	if ((r % 2)); then there >>"$tmp/there"; here >>"$tmp/here"; else here >>"$tmp/here"; there >>"$tmp/there"; fi
done
for f in here there; do
	[ "$(grep -c . "$tmp/$f")" = "$repeats" ] || { echo "bench: a run of cnn_train ($f) failed" >&2; exit 1; }
done

# stats FILE: median min max
stats() { sort -n "$1" | awk '{ a[NR] = $1 } END { printf "%.0f %.0f %.0f\n", a[int((NR + 1) / 2)], a[1], a[NR] }'; }
root=$("$repo/tests/cluster/release.sh" root "$release")
printf '# onednn_versions: cnn_train, %s, %d threads, batch %d, %d steps, %d runs each, interleaved, %s\n' \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$threads" "$batch" "$steps" "$repeats" "$(date -u +%F)"
printf '%-34s %10s %16s\n' build "median img/s" "(lowest..highest)"
read -r m1 lo1 hi1 < <(stats "$tmp/here")
read -r m2 lo2 hi2 < <(stats "$tmp/there")
printf '%-34s %10s %16s\n' "Debian $(cat /etc/debian_version), oneDNN $(dnnl /usr/include/oneapi/dnnl/dnnl_version.h)" \
	"$m1" "($lo1..$hi1)"
printf '%-34s %10s %16s\n' "Debian $(cat "$root/etc/debian_version"), oneDNN $(dnnl "$root/usr/include/oneapi/dnnl/dnnl_version.h")" \
	"$m2" "($lo2..$hi2)"
printf 'ratio (second / first): %s\n' "$(awk -v a="$m2" -v b="$m1" 'BEGIN { printf "%.3f", a / b }')"
