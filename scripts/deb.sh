#!/bin/bash
# Build the Debian packages of slurm-ddp with dpkg-buildpackage and check
# them with lintian.  The source is staged under build/deb/ (never the
# checkout's own build/), so the .debs land in build/deb/.
#   scripts/deb.sh            build, then lintian (fails on any error)
#   DEB_BUILD_OPTIONS=nocheck scripts/deb.sh    skip the unit tests in the build
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/build/deb
version=$(dpkg-parsechangelog -l "$repo/debian/changelog" -S Version)
src=$out/slurm-ddp-$version

for tool in dpkg-buildpackage dh lintian; do
	command -v "$tool" >/dev/null || { echo "deb: $tool is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$src"
cd "$repo"
# The files of the source tree: git's list when this is a checkout (tracked
# and untracked-but-not-ignored), else everything but build/.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
		[ -e "$f" ] && printf '%s\0' "$f"
	done | tar --null -T - -cf - | tar -xf - -C "$src"
else
	tar --exclude=./build -cf - . | tar -xf - -C "$src"
fi

cd "$src"
echo "deb: dpkg-buildpackage in $src"
# without nvcc there is no GPU module to package
profiles=()
[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || profiles=(-Pnocuda)
dpkg-buildpackage -b -us -uc "${profiles[@]}" >"$out/build.log" 2>&1 || {
	tail -n 60 "$out/build.log" >&2
	echo "deb: dpkg-buildpackage failed; the whole log is $out/build.log" >&2
	exit 1
}
changes=$(ls "$out"/slurm-ddp_"$version"_*.changes)
echo "deb: built $(cd "$out" && ls ./*.deb | tr '\n' ' ')"
echo "deb: Slurm-Version $(dpkg-deb -f "$out"/slurm-spank-ddp_"$version"_*.deb Slurm-Version)," \
	"Depends: $(dpkg-deb -f "$out"/slurm-spank-ddp_"$version"_*.deb Depends)"
# lintian: errors fail the build; warnings are printed for the reader.
lintian --fail-on error --tag-display-limit 0 "$changes" | tee "$out/lintian.log"
echo "deb: lintian: no errors ($(grep -c '^W:' "$out/lintian.log" || true) warnings)"
