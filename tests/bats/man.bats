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
	[ "$n" -ge 1 ]
}

@test "ddp-check(1) documents every option of ddp-check --help" {
	local text opt
	text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$REPO/man/ddp-check.1" 2>/dev/null)
	for opt in $("$REPO/build/bin/ddp-check" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
		if ! grep -qF -- "$opt" <<<"$text"; then
			echo "ddp-check(1) lacks $opt"
			return 1
		fi
	done
	# and every check name the program prints
	for opt in rdzv.join env.present env.rank env.world_size env.master env.local_rank \
		env.node_rank env.head net.iface net.kind net.probe clock.skew bind.cpus \
		bind.locality bind.gpus bind.visible coll.backend coll.allreduce coll.busbw \
		time.first_collective; do
		grep -qF -- "$opt" <<<"$text" || { echo "ddp-check(1) lacks $opt"; return 1; }
	done
}

@test "make install puts ddp-check and its man page under DESTDIR, make uninstall removes them" {
	local d="$BATS_TEST_TMPDIR/stage"
	run make -s -C "$REPO/check" install DESTDIR="$d" PREFIX=/usr
	assert_success
	[ -x "$d/usr/bin/ddp-check" ]
	[ -f "$d/usr/share/man/man1/ddp-check.1" ]
	run make -s -C "$REPO/check" uninstall DESTDIR="$d" PREFIX=/usr
	assert_success
	[ ! -e "$d/usr/bin/ddp-check" ]
	[ ! -e "$d/usr/share/man/man1/ddp-check.1" ]
}
