#!/usr/bin/env bats
# The man pages: each renders without a warning, and each names every
# option its program's --help lists (so neither can drift from the other).

load helpers

@test "every man page renders with man -l without warnings" {
	local page n=0
	for page in "$REPO"/man/*.[0-9]; do
		run env LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page"
		assert_success
		[ -n "$output" ]
		run bash -c "LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l '$page' 2>&1 >/dev/null"
		assert_output ""
		n=$((n + 1))
	done
	# the five the issue names
	[ "$n" -ge 5 ]
	for page in spank-ddp.8 ddp.yaml.5 ddp-env.1 ddp-check.1 cnn_train.1; do
		[ -f "$REPO/man/$page" ] || { echo "missing man/$page"; return 1; }
	done
}

# page_lacks PAGE WORD...: print the words the rendered page does not contain
page_lacks() {
	local page=$1 text w missing=0
	shift
	text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$REPO/man/$page" 2>/dev/null)
	for w in "$@"; do
		grep -qF -- "$w" <<<"$text" || { echo "$page lacks $w"; missing=1; }
	done
	return $missing
}

@test "ddp-env(1) and cnn_train(1) document every option of their --help" {
	local env_opts cnn_opts
	mapfile -t env_opts < <("$REPO/build/bin/ddp-env" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
	mapfile -t cnn_opts < <("$REPO/build/bin/cnn_train" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
	# (an empty list would check nothing: 18 and 41 now)
	[ "${#env_opts[@]}" -ge 15 ]
	[ "${#cnn_opts[@]}" -ge 35 ]
	page_lacks ddp-env.1 "${env_opts[@]}"
	page_lacks cnn_train.1 "${cnn_opts[@]}"
}

@test "ddp.yaml(5) documents every key of the shipped conf/ddp.yaml, and its example is a valid configuration" {
	# top-level keys and the network: ones, as the shipped file spells them
	local keys
	keys=$(grep -oE '^[a-z_]+:' "$REPO/conf/ddp.yaml" | tr -d :)
	keys+=" "$(sed -n '/^network:/,/^[a-z]/p' "$REPO/conf/ddp.yaml" | grep -oE '^  [a-z]+:' | sed 's/^  /network./; s/:$//')
	keys+=" env.nccl env.gloo"
	[ "$(wc -w <<<"$keys")" -ge 16 ]
	page_lacks ddp.yaml.5 $keys
	# the EXAMPLE section, as a file, passes ddp-env --check-config
	LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$REPO/man/ddp.yaml.5" 2>/dev/null |
		sed -n '/^EXAMPLE/,/^FILES/p' | sed '1d;$d' | sed 's/^ \{14\}//' >"$BATS_TEST_TMPDIR/example.yaml"
	grep -q '^partitions:' "$BATS_TEST_TMPDIR/example.yaml"
	# its rdzv_secret is a path on the admin's machine: point it at a real one
	install -m 600 /dev/null "$BATS_TEST_TMPDIR/secret"
	head -c 32 /dev/urandom >"$BATS_TEST_TMPDIR/secret"
	sed -i "s|/etc/slurm/ddp.secret|$BATS_TEST_TMPDIR/secret|" "$BATS_TEST_TMPDIR/example.yaml"
	run "$REPO/build/bin/ddp-env" --check-config "$BATS_TEST_TMPDIR/example.yaml"
	echo "$output"
	assert_success
}

@test "spank-ddp(8) names both options, every plugstack key, every variable the plugin sets and every user variable" {
	local keys vars
	# the plugstack keys, as config.c's error names them (19 now)
	read -ra keys < <(grep -oE "expected config, config_cache, default_backend[^\"]*" "$REPO/libddpenv/src/config.c" |
		sed 's/^expected //; s/ or /, /; s/\.NAME//g' | tr -d ,)
	[ "${#keys[@]}" -ge 15 ]
	page_lacks spank-ddp.8 --ddp --ddp-bind config= "${keys[@]}"
	# docs/contract.md's table of every variable set (42 now)
	mapfile -t vars < <(sed -n '/^| variable | value |/,/^$/p' "$REPO/docs/contract.md" |
		grep -oE '`[A-Z][A-Z_]+`' | tr -d '`' | sort -u)
	[ "${#vars[@]}" -ge 35 ]
	page_lacks spank-ddp.8 "${vars[@]}"
	page_lacks spank-ddp.8 DDP_HEAD_FROM DDP_PORT DDP_PORT_RANGE DDP_IFACE DDP_OMP_NUM_THREADS DDP_BIND
}

@test "ddp-check(1) documents every option of ddp-check --help, every check and every field of --json" {
	local text opt
	text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$REPO/man/ddp-check.1" 2>/dev/null)
	for opt in $("$REPO/build/bin/ddp-check" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
		if ! grep -qF -- "$opt" <<<"$text"; then
			echo "ddp-check(1) lacks $opt"
			return 1
		fi
	done
	# and every check name the program prints, and every field of its
	# --json object: from one task on loopback under NCCL (no GPU here, so
	# coll.backend fails and the collectives are skipped; every check is
	# still listed, and the rank carries its shared-memory fields)
	local port json
	port=$(free_port)
	json=$(env -i PATH="$PATH" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=0 WORLD_SIZE=1 \
		LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=0 DDP_BACKEND=nccl NCCL_SOCKET_IFNAME=lo \
		"$REPO/build/bin/ddp-check" -e 1K --timeout 10 --json 2>/dev/null) || true
	run /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
names = {c["name"] for c in r["checks"]}
assert len(names) == len(r["checks"]) >= 26, names
keys = set(r) | set(r["head"]) | set(r["summary"]) | set(r["checks"][0])
for x in r["ranks"]:
    keys |= set(x) | set(x.get("shm", {}))
assert "shm" in keys and "removeipc" in keys, keys
print("\n".join(sorted(names | keys)))' "$json"
	assert_success
	for opt in "${lines[@]}"; do
		grep -qwF -- "$opt" <<<"$text" || { echo "ddp-check(1) lacks $opt"; return 1; }
	done
}

@test "make install puts ddp-check and its man page under DESTDIR, make uninstall removes them" {
	local d="$BATS_TEST_TMPDIR/stage"
	run make -s -C "$REPO/tools/ddp-check" install DESTDIR="$d" PREFIX=/usr
	assert_success
	[ -x "$d/usr/bin/ddp-check" ]
	[ -f "$d/usr/share/man/man1/ddp-check.1" ]
	run make -s -C "$REPO/tools/ddp-check" uninstall DESTDIR="$d" PREFIX=/usr
	assert_success
	[ ! -e "$d/usr/bin/ddp-check" ]
	[ ! -e "$d/usr/share/man/man1/ddp-check.1" ]
}
