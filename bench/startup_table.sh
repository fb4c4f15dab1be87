# shellcheck shell=bash
# Sourced by bench/startup.sh and bench/startup_local.sh: their runs and the
# table both print.  The caller's names (each variant's), files (where its
# seconds go, $tmp/FILE, a number a line), why (an associative array: why a
# launcher fails) and run_variant; tmp its folder.
# shellcheck disable=SC2154 # (the caller's names, files and tmp)

# startup_stat FILE: median lowest highest of its numbers
startup_stat() {
	sort -n "$1" | awk '{ a[NR] = $1 } END { m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		printf "%.3f %.3f %.3f\n", m, a[1], a[NR] }'
}

# startup_why OUT: why a launcher failed: the first exception Python printed
# (the cause, the inner one), else OUT's last line
startup_why() {
	local w
	w=$(grep -E '^[A-Za-z_.]*(Error|Exception): ' "$1" | head -n 1 | cut -c1-160)
	echo "${w:-$(tail -n 1 "$1" | cut -c1-160)}"
}

# startup_rows: a row per variant (names, files, why: the caller's
# arrays), its median, lowest..highest and ratio to the first variant's
startup_rows() {
	local i m lo hi base
	printf '%-13s %9s %17s %12s\n' variant "median s" "lowest..highest" "x ${names[0]}"
	read -r base _ < <(startup_stat "$tmp/${files[0]}")
	for i in "${!names[@]}"; do
		if [ -n "${why[$i]:-}" ]; then
			printf '%-13s %9s   fails here: %s\n' "${names[$i]}" "-" "${why[$i]}"
			continue
		fi
		read -r m lo hi < <(startup_stat "$tmp/${files[$i]}")
		printf '%-13s %9s %17s %12s\n' "${names[$i]}" "$m" "$lo..$hi" \
			"$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
	done
}

# startup_runs ROUNDS MAYFAIL: a first run of each variant (run_variant I 0,
# the caller's), where variant MAYFAIL (a launcher that fails on some
# PyTorch) may fail and says why in why[MAYFAIL], the others must work;
# then ROUNDS rounds, the variants' order turning each round, each run's
# seconds appended to $tmp/FILE.  Exits 1 on a failure, its output shown.
startup_runs() {
	local rounds=$1 mayfail=$2 i k r
	for i in "${!names[@]}"; do
		run_variant "$i" 0 >/dev/null && continue
		if [ "$i" = "$mayfail" ]; then
			why[$i]=$(startup_why "$tmp/out")
			continue
		fi
		echo "bench: ${names[$i]} failed:" >&2
		tail -n 20 "$tmp/out" >&2
		exit 1
	done
	for ((r = 1; r <= rounds; r++)); do
		for ((k = 0; k < ${#names[@]}; k++)); do
			i=$(((r + k) % ${#names[@]}))
			[ -z "${why[$i]:-}" ] || continue
			if ! run_variant "$i" "$r" >>"$tmp/${files[$i]}"; then
				echo "bench: ${names[$i]} failed in round $r:" >&2
				tail -n 20 "$tmp/out" >&2
				exit 1
			fi
		done
	done
}
