#!/usr/bin/env bash
# pgbouncer-ensure.sh: print the path of a pgbouncer binary, installing
# Debian's package (1.18 on bookworm) when it is missing and apt-get can be
# run (as root). Used by the PgBouncer end-to-end test; the test starts its
# own pgbouncer on a free port with its own configuration, so the package's
# system service is neither started nor needed.
#
# Exit 0 with the path on stdout; exit 1 with the reason on stderr when no
# pgbouncer can be had (the test then skips, saying why).
set -euo pipefail

say() { printf 'pgbouncer-ensure: %s\n' "$*" >&2; }

find_bin() {
	command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; } || true
}

bin=$(find_bin)
if [ -z "$bin" ]; then
	if [ "$(id -u)" != 0 ]; then
		say "pgbouncer is not installed and installing it needs root: apt-get install pgbouncer"
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		say "pgbouncer is not installed and there is no apt-get to install it with"
		exit 1
	fi
	say "installing pgbouncer (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q pgbouncer >&2; then
		apt-get update -q >&2 || true
		if ! apt-get install -y -q pgbouncer >&2; then
			say "apt-get install pgbouncer failed"
			exit 1
		fi
	fi
	bin=$(find_bin)
	if [ -z "$bin" ]; then
		say "pgbouncer installed but not found on PATH or in /usr/sbin"
		exit 1
	fi
fi
echo "$bin"
