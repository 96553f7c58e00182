#!/usr/bin/env bash
# pg-ensure.sh: make sure a PostgreSQL server is reachable and print its URL.
#
# Order of attempts (the first that works wins):
#   1. $DATABASE_URL, if set.
#   2. A server already answering on 127.0.0.1:5432 (user postgres).
#   3. As root, the installed Debian cluster, started with pg_ctlcluster.
#   4. As a normal user with initdb/pg_ctl, a project-local cluster under
#      .data/pg on a free port (trust auth, listening on 127.0.0.1 only).
#   5. As root with apt-get, install Debian's postgresql and go to 3.
#   6. Otherwise: stop with a message saying what to install.
#
# With --database NAME, the database NAME is created if missing and the URL
# printed points at it (make run uses a "repolock" database; tests only need
# the admin URL, they create their own databases).
#
# The URL goes to stdout (one line, last); everything else to stderr.
set -euo pipefail

want_db=""
if [ "${1:-}" = "--database" ] && [ -n "${2:-}" ]; then
	want_db=$2
fi

say() { printf 'pg-ensure: %s\n' "$*" >&2; }
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data_dir="$root_dir/.data"

# can_connect URL: true when a query succeeds (or, without psql, when the
# port answers).
can_connect() {
	local url=$1
	if command -v psql >/dev/null 2>&1; then
		PGCONNECT_TIMEOUT=3 psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1
	else
		local hostport=${url#*@}
		hostport=${hostport%%/*}
		local host=${hostport%%:*} port=${hostport##*:}
		[ "$host" = "$port" ] && port=5432
		(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
	fi
}

wait_for() {
	local url=$1 i
	for i in $(seq 1 60); do
		can_connect "$url" && return 0
		sleep 0.5
	done
	return 1
}

# with_db URL NAME: URL with its database path replaced by NAME.
with_db() {
	local url=$1 name=$2 base query=""
	base=${url%%\?*}
	[ "$base" != "$url" ] && query="?${url#*\?}"
	printf '%s/%s%s' "${base%/*}" "$name" "$query"
}

found() {
	local url=$1
	if [ -n "$want_db" ] && [ -z "${DATABASE_URL:-}" ]; then
		if command -v psql >/dev/null 2>&1; then
			if [ "$(psql "$url" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$want_db'")" != 1 ]; then
				say "creating database $want_db"
				psql "$url" -qc "CREATE DATABASE \"$want_db\"" >&2
			fi
			url=$(with_db "$url" "$want_db")
		else
			say "psql is not installed: cannot create database $want_db; using the server's default database"
		fi
	fi
	say "using $(printf '%s' "$url" | sed -E 's#//([^:/@]+):[^@]*@#//\1:xxxxx@#')"
	printf '%s\n' "$url"
	exit 0
}

# PG_ENSURE_PORT moves the "standard port" probe (used to test the fallbacks).
default_port=${PG_ENSURE_PORT:-5432}
default_url="postgres://postgres@127.0.0.1:$default_port/postgres?sslmode=disable"

# 1. An explicit URL.
if [ -n "${DATABASE_URL:-}" ]; then
	if wait_for "$DATABASE_URL"; then found "$DATABASE_URL"; fi
	say "DATABASE_URL is set but nothing answers there; fix it or unset it to let this script find or start a server"
	exit 1
fi

# 2. A server on the standard port.
if can_connect "$default_url"; then found "$default_url"; fi

is_root() { [ "$(id -u)" = 0 ]; }

# start_debian_cluster: start the newest installed Debian cluster and make
# sure user postgres can log in over TCP; prints the URL.
start_debian_cluster() {
	command -v pg_ctlcluster >/dev/null 2>&1 || return 1
	local ver
	ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
	[ -n "$ver" ] || return 1
	say "starting Debian cluster $ver/main"
	pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 2>&1 || true
	local port
	port=$(sed -nE 's/^[[:space:]]*port[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "/etc/postgresql/$ver/main/postgresql.conf" | head -n 1)
	port=${port:-5432}
	local url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	if wait_for "$url"; then echo "$url"; return 0; fi
	# Debian's default pg_hba asks for a password over TCP: give the
	# postgres role one (a development default) through the local socket.
	if command -v su >/dev/null 2>&1; then
		su postgres -c "psql -p $port -Atqc \"ALTER ROLE postgres PASSWORD 'postgres'\"" >/dev/null 2>&1 || true
		url="postgres://postgres:postgres@127.0.0.1:$port/postgres?sslmode=disable"
		if wait_for "$url"; then echo "$url"; return 0; fi
	fi
	return 1
}

# 3. Root with Debian's cluster tools.
if is_root; then
	if url=$(start_debian_cluster); then found "$url"; fi
fi

# 4. A project-local cluster for a normal user.
find_pg_bin() {
	local b
	if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
	b=$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)
	[ -n "$b" ] && echo "$b"
}
free_port() {
	local p
	for p in $(seq 54329 54429); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
	done
	return 1
}
if ! is_root; then
	initdb=$(find_pg_bin initdb || true)
	pg_ctl=$(find_pg_bin pg_ctl || true)
	if [ -n "$initdb" ] && [ -n "$pg_ctl" ]; then
		pgdata="$data_dir/pg"
		mkdir -p "$data_dir"
		if [ -f "$pgdata/repolock-port" ]; then
			port=$(cat "$pgdata/repolock-port")
		else
			say "creating a project-local cluster in $pgdata"
			rm -rf "$pgdata"
			"$initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --locale=C >&2
			port=$(free_port)
			echo "$port" >"$pgdata/repolock-port"
		fi
		url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
		if ! can_connect "$url"; then
			say "starting the project-local cluster on port $port"
			"$pg_ctl" -D "$pgdata" -l "$data_dir/pg.log" -w \
				-o "-p $port -c listen_addresses=127.0.0.1 -k $pgdata -c max_connections=200" start >&2
		fi
		if wait_for "$url"; then found "$url"; fi
		say "the project-local cluster did not start; see $data_dir/pg.log"
		exit 1
	fi
fi

# 5. Root with apt: install PostgreSQL.
if is_root && command -v apt-get >/dev/null 2>&1; then
	say "no PostgreSQL found: installing Debian's postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq postgresql >&2
	if url=$(start_debian_cluster); then found "$url"; fi
fi

# 6. Nothing worked.
say "no PostgreSQL server could be found or started."
say "Install one (Debian/Ubuntu: 'sudo apt-get install postgresql'; it needs initdb and pg_ctl for a"
say "project-local cluster), or point DATABASE_URL at an existing server, e.g."
say "  DATABASE_URL='postgres://user:password@host:5432/postgres?sslmode=disable' make test"
exit 1
