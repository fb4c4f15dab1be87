#!/bin/sh
# Run a command as root inside a Debian root (a folder mmdebstrap made), as
# on a machine of that release: the host's /proc, /sys, /dev and /run/netns
# (the test cluster's network namespaces), the host's resolv.conf, and the
# folders asked for, all in a mount namespace of the command's own, so that
# nothing stays mounted when it ends.
#
#   chroot.sh [-b SRC:DST]... [-r SRC:DST]... [-C DIR] ROOT CMD...
#     -b SRC:DST   SRC at DST inside (DST made if missing), read-write
#     -r SRC:DST   the same, read-only
#     -C DIR       CMD's working directory inside (default /)
#
# The binds are made in order, so a later one may go inside an earlier one
# (this checkout, then its build/ from another folder).
set -eu

tab=$(printf '\t')
usage() { echo "usage: chroot.sh [-b SRC:DST]... [-r SRC:DST]... [-C DIR] ROOT CMD..." >&2; exit 2; }

# inside the new mount namespace: the mounts, then CMD
if [ "${1:-}" = --inside ]; then
	shift
	binds=$1 dir=$2 r=$3
	shift 3
	mount --bind "$r" "$r"
	mount -t proc proc "$r/proc"
	mount --rbind /sys "$r/sys"
	mount --make-rslave "$r/sys"
	mount --rbind /dev "$r/dev"
	mount --make-rslave "$r/dev"
	mkdir -p /run/netns "$r/run/netns"
	mount --bind /run/netns "$r/run/netns"
	# one "rw|ro<tab>SRC<tab>DST" a line
	printf '%s' "$binds" | while IFS="$tab" read -r mode src dst; do
		mkdir -p "$r$dst"
		mount --bind "$src" "$r$dst"
		[ "$mode" = rw ] || mount -o remount,bind,ro "$r$dst"
	done
	cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
	exec chroot "$r" env -C "$dir" "$@"
fi

binds='' dir=/
while getopts b:r:C: o; do
	case $o in
	b | r)
		src=${OPTARG%%:*} dst=${OPTARG#*:}
		case $OPTARG in *:/*) ;; *) echo "chroot.sh: -$o $OPTARG: expected SRC:DST, DST an absolute path" >&2; exit 2 ;; esac
		[ -d "$src" ] || { echo "chroot.sh: -$o $OPTARG: $src is not a folder" >&2; exit 2; }
		mode=rw
		[ "$o" = b ] || mode=ro
		binds="$binds$mode$tab$src$tab$dst
" ;;
	C) dir=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ "$#" -ge 2 ] || usage
[ "$(id -u)" = 0 ] || { echo "chroot.sh: needs root (mounts, chroot)" >&2; exit 2; }
[ -x "$1/bin/sh" ] || { echo "chroot.sh: $1 is no Debian root (no bin/sh in it)" >&2; exit 2; }
exec unshare --mount --propagation private sh "$0" --inside "$binds" "$dir" "$@"
