#!/usr/bin/env bash
# bench-http.sh (make bench-http): the api binary, as deployed with its
# default settings, against the speed of its own database. See
# docs/benchmarks.md#make-bench-http.
#
# For each binary (bin/repolock, and with BENCH_BASE_BIN or BENCH_BASE_REF a
# baseline too) on its own fresh database, one after the other per phase,
# BENCH_CONNECTIONS (32) connections for BENCH_DURATION (15s) each:
#   f  pgbench -M prepared: a raw one-column INSERT ... ON CONFLICT DO NOTHING
#   s  pgbench -M prepared: exactly the statements the binary executes for one
#      acquire, captured from the binary itself (scripts/benchsql capture)
#   h  wrk: POST /v1/locks/acquire, a unique URL per request
#   a  wrk: POST /v1/applications, a unique name and URL per request
#   m  wrk: GET /v1/me
#   z  wrk: GET /healthz
#   l  wrk: POST /v1/leases (a unique key) then DELETE /v1/leases/{id}, with
#      100 live leases set up before (rate: acquire+release pairs/s; p50/p99
#      over both requests)
#   L  the same with 10,000 live leases set up before
#   k  wrk: POST /v1/leases/{id}/keepalive, one live lease per tenant
#   r  the same as h, after 100,000 reservations of other tenants' prefixes
#      were added (spread like organisations' prefixes on a few hosts, none
#      covering the URLs acquired); r/h is printed. Skipped (n/a) for a
#      binary whose database has no reservations table
# and prints rates, p50/p99, non-2xx counts, the Postgres sessions opened
# during each phase (pg_stat_database.sessions) and the ratios against their
# targets.
#
# Environment:
#   BENCH_DURATION     seconds per phase, "15s" or "15" (default 15s)
#   BENCH_CONNECTIONS  connections / pgbench clients (default 32)
#   BENCH_THREADS      wrk and pgbench threads (default: number of CPUs)
#   BENCH_PHASES       phases to run (default "f s h a m z")
#   BENCH_BIN          the candidate binary (default bin/repolock; make builds it)
#   BENCH_BASE_BIN     a baseline binary to run side by side
#   BENCH_BASE_REF     a git ref: checked out with git worktree add into a
#                      temporary directory and built as the baseline
#   BENCH_SETTLE       seconds to wait after a phase for Postgres' statistics (11)
#   BENCH_TENANTS      tenants whose tokens the requests take turns with (1024):
#                      the binary keeps its default per-tenant rate limit
#                      (RATE_LIMIT), so the load is spread as a multi-tenant
#                      platform's is, never one tenant at thousands of req/s
#   BENCH_PROFILE      a directory: the binary also serves Go's profiler
#                      (DEBUG_LISTEN_ADDR on loopback) and a CPU profile of
#                      each wrk phase is saved there as SIDE-PHASE.pprof
#                      (go tool pprof -top bin/repolock DIR/cand-h.pprof); the
#                      sampling costs the binary a little CPU, so compare
#                      rates from runs without it
#   BENCH_PIN          1: Postgres runs on the first half of the CPUs, this
#                      script and all it starts (the binary, wrk, pgbench) on
#                      the other half, as when the service and its database
#                      are on separate machines: the binary's CPU is then not
#                      taken from Postgres. Needs a local Postgres whose
#                      processes this user may re-pin (taskset); their CPU
#                      affinity is restored at the end
#   DATABASE_URL       the Postgres server (default: scripts/pg-ensure.sh)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { printf 'bench-http: %s\n' "$*" >&2; }

duration=${BENCH_DURATION:-15s}
duration=${duration%s}
[[ $duration =~ ^[0-9]+$ ]] && [ "$duration" -gt 0 ] || { say "BENCH_DURATION must be whole seconds, like 15s"; exit 2; }
conns=${BENCH_CONNECTIONS:-32}
tenants=${BENCH_TENANTS:-1024}
[[ $tenants =~ ^[0-9]+$ ]] && [ "$tenants" -gt 0 ] || { say "BENCH_TENANTS must be a positive whole number"; exit 2; }
threads=${BENCH_THREADS:-$(nproc 2>/dev/null || echo 2)}
phases=${BENCH_PHASES:-f s h a m z l L k}
cand_bin=${BENCH_BIN:-bin/repolock}

# Tools: wrk and pgbench/psql from Debian, jq for the admin API's JSON.
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v jq >/dev/null 2>&1 || need+=(jq)
{ command -v pgbench >/dev/null 2>&1 && command -v psql >/dev/null 2>&1; } || need+=(postgresql-client)
if [ ${#need[@]} -gt 0 ]; then
	scripts/apt-install.sh "${need[@]}" || { say "cannot install ${need[*]}; install them and run again"; exit 1; }
fi

admin_url=$(scripts/pg-ensure.sh | tail -n 1)
# with_db URL NAME: URL with its database path replaced by NAME.
with_db() {
	local url=$1 name=$2 base query=""
	base=${url%%\?*}
	[ "$base" != "$url" ] && query="?${url#*\?}"
	printf '%s/%s%s' "${base%/*}" "$name" "$query"
}
psql_admin() { psql "$admin_url" -X -v ON_ERROR_STOP=1 -Atq "$@"; }


tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-http.XXXXXX")
declare -A server_pid=() db_name=() base_url=() debug_url=() token=() tokens=() bin=() pool=()
base_tree=""
cleanup() {
	local rc=$? side
	set +e
	trap '' INT TERM # finish cleaning up even if interrupted again
	for side in "${!server_pid[@]}"; do
		kill -INT "${server_pid[$side]}" 2>/dev/null && wait "${server_pid[$side]}" 2>/dev/null
	done
	for side in "${!db_name[@]}"; do
		psql_admin -c "DROP DATABASE IF EXISTS \"${db_name[$side]}\" WITH (FORCE)" >/dev/null 2>&1
	done
	[ -n "$base_tree" ] && git worktree remove --force "$base_tree" >/dev/null 2>&1
	unpin_postgres
	if [ $rc -ne 0 ] && [ -d "$tmp" ]; then
		say "stopped with status $rc; server logs kept in $tmp"
	else
		rm -rf "$tmp"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# BENCH_PIN: Postgres' processes on db_cpus, everything else on app_cpus.
pin_note="not pinned (Postgres, the binary and the load generators share every CPU)"
pg_pinned=()
declare -A pg_mask=()
unpin_postgres() {
	local p
	for p in "${pg_pinned[@]}"; do taskset -p "${pg_mask[$p]}" "$p" >/dev/null 2>&1; done
	pg_pinned=()
}
if [ "${BENCH_PIN:-0}" = 1 ]; then
	ncpu=$(nproc)
	[ "$ncpu" -ge 2 ] || { say "BENCH_PIN=1 needs at least 2 CPUs"; exit 2; }
	db_cpus="0-$((ncpu / 2 - 1))"
	app_cpus="$((ncpu / 2))-$((ncpu - 1))"
	datadir=$(psql_admin -c 'SHOW data_directory')
	postmaster=$(head -n 1 "$datadir/postmaster.pid" 2>/dev/null) || { say "BENCH_PIN=1: cannot read $datadir/postmaster.pid (a local Postgres this user can see is needed)"; exit 2; }
	for p in "$postmaster" $(pgrep -P "$postmaster"); do
		pg_mask[$p]=$(taskset -p "$p" | awk '{print $NF}')
		taskset -pc "$db_cpus" "$p" >/dev/null || { unpin_postgres; say "BENCH_PIN=1: cannot set the CPU affinity of Postgres (pid $p)"; exit 2; }
		pg_pinned+=("$p")
	done
	taskset -pc "$app_cpus" $$ >/dev/null
	pin_note="pinned: Postgres on CPU $db_cpus; the binary, wrk and pgbench on CPU $app_cpus"
fi

say "building scripts/benchsql"
go build -o "$tmp/benchsql" ./scripts/benchsql

sides=(cand)
bin[cand]=$cand_bin
[ -x "$cand_bin" ] || { say "$cand_bin is missing: run make build (make bench-http does)"; exit 1; }
if [ -n "${BENCH_BASE_REF:-}" ] && [ -z "${BENCH_BASE_BIN:-}" ]; then
	base_tree="$tmp/base-src"
	say "building the baseline from $BENCH_BASE_REF"
	git worktree add --detach "$base_tree" "$BENCH_BASE_REF" >/dev/null 2>&1
	(cd "$base_tree" && go build -o "$tmp/base-api" ./cmd/api)
	BENCH_BASE_BIN="$tmp/base-api"
fi
if [ -n "${BENCH_BASE_BIN:-}" ]; then
	[ -x "$BENCH_BASE_BIN" ] || { say "BENCH_BASE_BIN=$BENCH_BASE_BIN is not an executable"; exit 1; }
	sides=(base cand)
	bin[base]=$BENCH_BASE_BIN
fi
admin_token="rla_bench_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# start_side SIDE: a fresh database, the binary on it with its defaults (only
# DATABASE_URL, ADMIN_TOKEN, LISTEN_ADDR), a tenant and its token, the
# scratch table of phase f, and the captured statements of phase s.
start_side() {
	local side=$1 db url listen i
	db="repolock_bench_${side}_$$"
	db_name[$side]=$db
	psql_admin -c "CREATE DATABASE \"$db\"" >/dev/null
	url=$(with_db "$admin_url" "$db")
	listen=$("$tmp/benchsql" freeport)
	local debug=""
	if [ -n "${BENCH_PROFILE:-}" ]; then
		mkdir -p "$BENCH_PROFILE"
		debug=$("$tmp/benchsql" freeport)
		debug_url[$side]="http://$debug"
	fi
	DATABASE_URL="$url" ADMIN_TOKEN="$admin_token" LISTEN_ADDR="$listen" DEBUG_LISTEN_ADDR="$debug" \
		"${bin[$side]}" serve >"$tmp/server-$side.log" 2>&1 &
	server_pid[$side]=$!
	base_url[$side]="http://$listen"
	for i in $(seq 1 300); do
		# /readyz: serve listens before the database answered and its
		# migrations ran (API routes answer 503 until then).
		curl -fsS -o /dev/null "${base_url[$side]}/readyz" 2>/dev/null && break
		kill -0 "${server_pid[$side]}" 2>/dev/null || { say "$side: the binary exited:"; tail -n 20 "$tmp/server-$side.log" >&2; return 1; }
		sleep 0.1
	done
	curl -fsS -o /dev/null "${base_url[$side]}/readyz" || { say "$side: the binary was not ready (/readyz) within 30 s"; return 1; }
	local created="" path
	# The admin route of tenants: /v1/admin/users today (tenants after the
	# rename); the first that exists is used.
	for path in /v1/admin/users /v1/admin/tenants; do
		created=$(curl -sS -H "Authorization: Bearer $admin_token" -H 'Content-Type: application/json' \
			-d '{"name":"bench"}' -w '\n%{http_code}' "${base_url[$side]}$path")
		[ "$(tail -n 1 <<<"$created")" = 201 ] && break
		created=""
	done
	[ -n "$created" ] || { say "$side: could not create a tenant through the admin API"; return 1; }
	token[$side]=$(head -n 1 <<<"$created" | jq -r .token)
	# More tenants: requests take turns with their tokens (BENCH_TENANTS).
	# Enough of them that none reaches its default limit (50/s) even at the
	# fastest phase's rate; created 8 at a time.
	local more
	more=$(seq 2 "$tenants" | xargs -P 8 -I{} curl -fsS -H "Authorization: Bearer $admin_token" \
		-H 'Content-Type: application/json' -d '{"name":"bench-{}"}' "${base_url[$side]}$path" | jq -r .token | paste -sd, -)
	tokens[$side]=${token[$side]}${more:+,$more}
	psql "$url" -X -v ON_ERROR_STOP=1 -q -c "CREATE TABLE bench_raw (k text PRIMARY KEY)"
	mkdir -p "$tmp/$side"
	# Phase s's statements, captured only when s runs.
	if [[ " $phases " == *" s "* ]]; then
		"$tmp/benchsql" capture -bin "${bin[$side]}" -database-url "$url" -admin-token "$admin_token" \
			-token "${token[$side]}" -out "$tmp/$side"
		cat scripts/bench-http/key.sql "$tmp/$side/s.sql" >"$tmp/$side/s-run.sql"
	fi
	cat scripts/bench-http/key.sql scripts/bench-http/f.sql >"$tmp/$side/f-run.sql"
	# The pool size the binary runs with, from its own /metrics (go_sql_*,
	# Prometheus' DBStats collector); the code's default when not exported.
	local metrics
	metrics=$(curl -fsS "${base_url[$side]}/metrics")
	pool[$side]=$(awk '/^go_sql_max_open_connections/ {v = $NF} END {print v}' <<<"$metrics")
	pool[$side]=${pool[$side]:-20?}
	say "$side: ${bin[$side]} on $db at ${base_url[$side]}, pool size ${pool[$side]}"
}

# dbstats SIDE: "sessions tup_inserted" of pg_stat_database for the side's
# database, read from the admin database (so reading it opens no session
# there). A backend flushes its counts to shared memory at most once a
# second; one that goes idle less than a second after its last flush keeps
# them up to 10 s (PGSTAT_IDLE_INTERVAL) before it flushes. So the read waits
# BENCH_SETTLE (11) seconds, then reads until two reads a second apart agree.
# (sessions is exact without the wait: a new backend flushes at its first
# idle moment; the wait is for tup_inserted.)
settle=${BENCH_SETTLE:-11}
dbstats() {
	local db=${db_name[$1]} a b i q
	q="SELECT sessions || ' ' || tup_inserted FROM pg_stat_database WHERE datname = '$db'"
	sleep "$settle"
	a=$(psql_admin -c "$q")
	for i in 1 2 3 4 5; do
		sleep 1
		b=$(psql_admin -c "$q")
		[ "$a" = "$b" ] && break
		a=$b
	done
	echo "$b"
}

declare -A rate=() p50=() p99=() bad=() opened=() count=() inserted=()

# measured SIDE PHASE OUTFILE CMD...: runs the load generator CMD (its
# output to OUTFILE) and records what the phase cost: the load generator's
# own CPU (bash's time: the command and its children), the binary's CPU
# (/proc/PID/stat), the whole machine's busy CPU (/proc/stat: every state but
# idle and iowait) and the WAL Postgres wrote (pg_current_wal_lsn, server-
# wide: quiet machines only). The rest of the machine's CPU is Postgres' and
# the kernel's. Returns CMD's status.
declare -A cpu_gen=() cpu_bin=() cpu_busy=() cpu_pg=() wal_bytes=() per_batch=()
# batch_counts SIDE: "calls batches" of the binary's batched writes (group
# commit, repolock_db_batch_calls_total and repolock_db_batches_total summed
# over statements; "0 0" from a binary that does not export them).
batch_counts() {
	curl -fsS "${base_url[$1]}/metrics" 2>/dev/null |
		awk '/^repolock_db_batch_calls_total/ {c += $NF} /^repolock_db_batches_total/ {b += $NF} END {printf "%d %d\n", c, b}' || echo "0 0"
}
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Postgres' own CPU, where its postmaster is a local process this user can
# read: the postmaster, its live children (backends, walwriter,
# checkpointer, autovacuum) and the children it has reaped (cutime and
# cstime: pgbench's backends exit). It is CPU time, not wall time, so other
# work on the machine barely moves it; but every database on the server
# counts, so it means something only on a server of the benchmark's own
# (DATABASE_URL pointing at one), and the report says which.
pg_postmaster=
pg_dir=$(psql_admin -c 'SHOW data_directory' 2>/dev/null || true)
if [ -n "$pg_dir" ] && [ -r "$pg_dir/postmaster.pid" ]; then
	pg_postmaster=$(head -n 1 "$pg_dir/postmaster.pid")
	[ -r "/proc/$pg_postmaster/stat" ] || pg_postmaster=
fi
pg_ticks() {
	[ -n "$pg_postmaster" ] || { echo 0; return; }
	local t c
	t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pg_postmaster/stat" 2>/dev/null || echo 0)
	for c in $(pgrep -P "$pg_postmaster"); do t=$((t + $(proc_ticks "$c"))); done
	echo "$t"
}
measured() {
	local side=$1 ph=$2 outfile=$3 rc=0 b0 b1 m0 m1 w0 w1 gen c0 n0 c1 n1 p0 p1
	shift 3
	read -r c0 n0 < <(batch_counts "$side")
	w0=$(psql_admin -c 'SELECT pg_current_wal_lsn()')
	m0=$(busy_ticks)
	b0=$(proc_ticks "${server_pid[$side]}")
	p0=$(pg_ticks)
	{ TIMEFORMAT='%U %S'; time "$@" >"$outfile" 2>&1 || rc=$?; } 2>"$outfile.cpu"
	b1=$(proc_ticks "${server_pid[$side]}")
	p1=$(pg_ticks)
	m1=$(busy_ticks)
	w1=$(psql_admin -c 'SELECT pg_current_wal_lsn()')
	read -r c1 n1 < <(batch_counts "$side")
	per_batch[$side,$ph]=$(awk -v c="$((c1 - c0))" -v n="$((n1 - n0))" 'BEGIN {if (n > 0) printf "%.1f", c / n; else print "-"}')
	gen=$(awk '{print $1 + $2}' "$outfile.cpu")
	cpu_gen[$side,$ph]=$gen
	cpu_bin[$side,$ph]=$(awk -v t="$((b1 - b0))" -v hz="$clk_tck" 'BEGIN {print t / hz}')
	cpu_busy[$side,$ph]=$(awk -v t="$((m1 - m0))" -v hz="$clk_tck" 'BEGIN {print t / hz}')
	cpu_pg[$side,$ph]=$(awk -v t="$((p1 - p0))" -v hz="$clk_tck" 'BEGIN {print t / hz}')
	wal_bytes[$side,$ph]=$(psql_admin -c "SELECT pg_wal_lsn_diff('$w1', '$w0')::bigint")
	return $rc
}
clk_tck=$(getconf CLK_TCK)

# run_pgbench SIDE PHASE: rate = successful transactions/s; latencies from
# pgbench's per-transaction log.
run_pgbench() {
	local side=$1 ph=$2 url out defs=()
	url=$(with_db "$admin_url" "${db_name[$side]}")
	if [ "$ph" = s ]; then
		while IFS= read -r line; do defs+=(-D "$line"); done <"$tmp/$side/s.defines"
	fi
	mkdir -p "$tmp/log-$side-$ph"
	measured "$side" "$ph" "$tmp/out-$side-$ph" pgbench -n -M prepared -c "$conns" -j "$threads" -T "$duration" -D i=0 "${defs[@]}" \
		-l --log-prefix="$tmp/log-$side-$ph/tx" -f "$tmp/$side/$ph-run.sql" "$url" || {
		say "$side $ph: pgbench failed:"
		cat "$tmp/out-$side-$ph" >&2
		return 1
	}
	out=$(<"$tmp/out-$side-$ph")
	rate[$side,$ph]=$(awk -F'= ' '/^tps = / {split($2, a, " "); print a[1]; exit}' <<<"$out")
	count[$side,$ph]=$(awk -F': ' '/^number of transactions actually processed/ {split($2, a, "/"); print a[1]; exit}' <<<"$out")
	bad[$side,$ph]=$(awk -F': ' '/^number of failed transactions/ {split($2, a, " "); print a[1]; exit}' <<<"$out")
	bad[$side,$ph]=${bad[$side,$ph]:-0}
	if [ "${count[$side,$ph]:-0}" = 0 ]; then
		say "$side $ph: pgbench completed no transaction:"
		grep -m 5 -iE 'error|abort' "$tmp/out-$side-$ph" >&2 || cat "$tmp/out-$side-$ph" >&2
		return 1
	fi
	read -r p50[$side,$ph] p99[$side,$ph] < <(cat "$tmp/log-$side-$ph"/tx* | awk '{print $3}' | sort -n |
		awk '{v[NR]=$1} END {if (NR == 0) {print "0 0"; exit}; i50=int(NR*0.50); i99=int(NR*0.99); if (i50<1) i50=1; if (i99<1) i99=1; printf "%.2f %.2f\n", v[i50]/1000, v[i99]/1000}')
	rm -rf "$tmp/log-$side-$ph"
}

# run_wrk SIDE PHASE: rate = 2xx responses/s.
run_wrk() {
	local side=$1 ph=$2 out res prof=""
	if [ -n "${debug_url[$side]:-}" ] && [ "$duration" -gt 4 ]; then
		curl -fsS -o "$BENCH_PROFILE/$side-$ph.pprof" \
			"${debug_url[$side]}/debug/pprof/profile?seconds=$((duration - 3))" &
		prof=$!
	fi
	local wph=$ph wrun=$side
	# Phase r is phase h on a database with reservations, on other URLs.
	[ "$ph" = r ] && wph=h wrun=$side-r
	# Phase L runs after l on the same database: keys of its own, or the
	# leases l left held when its wrk stopped between an acquire and its
	# release (ttl 1m) answer lease_held.
	[ "$ph" = L ] && wrun=$side-L
	BENCH_PHASE=$wph BENCH_TOKENS=${tokens[$side]} BENCH_RUN=$wrun BENCH_LEASES=${kleases[$side]:-} \
		measured "$side" "$ph" "$tmp/out-$side-$ph" \
		wrk -t "$threads" -c "$conns" -d "${duration}s" --timeout 30s -s scripts/bench-http/wrk.lua "${base_url[$side]}" || {
		say "$side $ph: wrk failed:"
		cat "$tmp/out-$side-$ph" >&2
		return 1
	}
	out=$(<"$tmp/out-$side-$ph")
	[ -n "$prof" ] && { wait "$prof" || say "$side $ph: no CPU profile"; }
	grep -v '^RESULT' <<<"$out" | grep -i 'non-2xx\|socket errors' | sed "s/^/bench-http: $side $ph: /" >&2 || true
	res=$(grep '^RESULT' <<<"$out")
	local requests dur p50us p99us non2xx sockerr
	requests=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$res")
	dur=$(sed -E 's/.*duration_us=([0-9]+).*/\1/' <<<"$res")
	p50us=$(sed -E 's/.*p50_us=([0-9]+).*/\1/' <<<"$res")
	p99us=$(sed -E 's/.*p99_us=([0-9]+).*/\1/' <<<"$res")
	non2xx=$(sed -E 's/.*non2xx=([0-9]+).*/\1/' <<<"$res")
	sockerr=$(sed -E 's/.*socket_errors=([0-9]+).*/\1/' <<<"$res")
	# l and L: one operation is an acquire and a release, two requests.
	local per=1
	case $ph in l | L) per=2 ;; esac
	rate[$side,$ph]=$(awk -v n="$requests" -v b="$non2xx" -v d="$dur" -v per="$per" 'BEGIN {printf "%.1f", (n-b)/per/(d/1e6)}')
	p50[$side,$ph]=$(awk -v v="$p50us" 'BEGIN {printf "%.2f", v/1000}')
	p99[$side,$ph]=$(awk -v v="$p99us" 'BEGIN {printf "%.2f", v/1000}')
	bad[$side,$ph]=$((non2xx + sockerr))
	if [ "$non2xx" -gt 0 ]; then
		# What failed, from the binary's access log (wrk only counts).
		grep -m 1 '"status":[45][0-9][0-9]' "$tmp/server-$side.log" | sed "s/^/bench-http: $side $ph: first failed request: /" >&2 || true
	fi
	count[$side,$ph]=$(((requests - non2xx) / per))
}

# live_leases SIDE N: N live leases (ttl 1h) in the side's database, keys
# live-1..live-N of the first tenant, inserted directly (with their
# tokens): the state a deployment with N held leases has.
live_leases() {
	local url
	url=$(with_db "$admin_url" "${db_name[$1]}")
	psql "$url" -X -v ON_ERROR_STOP=1 -q -c "
		WITH u AS (SELECT id FROM cluster_users WHERE name = 'bench')
		INSERT INTO lease_tokens (cluster_user_id, key, token)
		SELECT u.id, 'live-' || g, 1 FROM u, generate_series(1, $2) g ON CONFLICT DO NOTHING;
		WITH u AS (SELECT id FROM cluster_users WHERE name = 'bench')
		INSERT INTO leases (cluster_user_id, key, token, ttl_ms, acquired_at, expires_at)
		SELECT u.id, 'live-' || g, 1, 3600000, now(), now() + interval '1 hour' FROM u, generate_series(1, $2) g
		ON CONFLICT DO NOTHING;
		ANALYZE leases; ANALYZE lease_tokens;"
}

# keepalive_leases SIDE: one lease (ttl 1h) per tenant, acquired through
# the API, as "token:lease_id,..." for phase k.
keepalive_leases() {
	local side=$1
	tr ',' '\n' <<<"${tokens[$side]}" | xargs -P 8 -I{} sh -c \
		'id=$(curl -fsS -H "Authorization: Bearer {}" -H "Content-Type: application/json" -d "{\"key\":\"bench/keepalive\",\"ttl\":\"1h\"}" "$0/v1/leases" | jq -r .lease_id) && echo "{}:$id"' \
		"${base_url[$side]}" | paste -sd, -
}
declare -A kleases=()

# reservations SIDE N: N reservations in the side's database, inserted
# directly, each for one of the tenants other than "bench" (the requests
# take turns with every tenant's token; none of these prefixes covers
# github.com/bench-h/, so every claim is checked and none refused): 80%
# host/org on github.com, 10% host/group/subgroup on gitlab.com, 5% exact
# repository keys, 5% host/org on 50 other hosts.
reservations() {
	local url
	url=$(with_db "$admin_url" "${db_name[$1]}")
	psql "$url" -X -v ON_ERROR_STOP=1 -q -c "
		WITH u AS (SELECT array_agg(id) AS ids FROM cluster_users WHERE name <> 'bench')
		INSERT INTO reservations (prefix, cluster_user_id)
		SELECT CASE
				WHEN g % 20 < 16 THEN 'github.com/org-' || g
				WHEN g % 20 < 18 THEN 'gitlab.com/group-' || g || '/sub-' || (g % 7)
				WHEN g % 20 = 18 THEN 'github.com/team-' || g || '/repo-' || g
				ELSE 'git' || (g % 50) || '.example.com/org-' || g
			END,
			u.ids[1 + g % cardinality(u.ids)]
		FROM u, generate_series(1, $2) g
		ON CONFLICT DO NOTHING;"
	# Vacuumed and analyzed, as a table of long-standing reservations is
	# (hint bits set, visibility map current): the phase does not pay for
	# the insert, nor does autovacuum run on it during the phase.
	psql "$url" -X -v ON_ERROR_STOP=1 -q -c "VACUUM (ANALYZE) reservations"
}

# has_table SIDE TABLE: the side's database has TABLE.
has_table() {
	[ "$(psql "$(with_db "$admin_url" "${db_name[$1]}")" -X -Atq -c "SELECT to_regclass('$2') IS NOT NULL")" = t ]
}

# supports SIDE PHASE: whether the side's binary has what the phase
# measures. A baseline older than leases (BENCH_BASE_REF before round 4)
# has no lease routes: its lease phases are skipped, not failed; the same
# for phase r and a baseline from before reservations.
supports() {
	case $2 in
	l | L | k) has_table "$1" leases ;;
	r) has_table "$1" reservations ;;
	*) return 0 ;;
	esac
}

# prepare SIDE PHASE: the state a phase measures.
prepare() {
	case $2 in
	l) live_leases "$1" 100 ;;
	L) live_leases "$1" 10000 ;;
	k) [ -n "${kleases[$1]:-}" ] || kleases[$1]=$(keepalive_leases "$1") ;;
	r) reservations "$1" 100000 ;;
	esac
}

# disk_flush_us: the time of one 8 KiB O_DSYNC write into a preallocated
# file beside the server's data directory (as WAL segments are), in µs, or
# nothing when the server is not local to this user. With a slow flush
# the floor f is bound by its WAL flushes; with a fast one, as on the
# development machine (about 90 µs), by CPU, and every ratio to f is then
# a ratio of CPU per operation.
disk_flush_us() {
	local dir f out
	dir=$(psql_admin -c 'SHOW data_directory' 2>/dev/null) || return 0
	dir=$(dirname "$dir")
	[ -d "$dir" ] && [ -w "$dir" ] || return 0
	f=$(mktemp -p "$dir" .bench-http-flush.XXXXXX) || return 0
	dd if=/dev/zero of="$f" bs=8k count=1000 status=none 2>/dev/null && sync "$f" 2>/dev/null
	out=$(LC_ALL=C dd if=/dev/zero of="$f" bs=8k count=1000 oflag=dsync conv=notrunc 2>&1) || out=
	rm -f "$f"
	awk '/copied/ {for (i = 1; i <= NF; i++) if ($i == "s,") printf "%.0f", $(i - 1) * 1e6 / 1000}' <<<"$out"
}
flush_us=$(disk_flush_us)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A last=()
for side in "${sides[@]}"; do start_side "$side"; done
for side in "${sides[@]}"; do last[$side]=$(dbstats "$side"); done

declare -A label=([f]="pgbench raw INSERT ON CONFLICT (tps)" [s]="pgbench the acquire's statements (tps)"
	[h]="POST /v1/locks/acquire (2xx/s)" [a]="POST /v1/applications (2xx/s)" [m]="GET /v1/me (2xx/s)" [z]="GET /healthz (2xx/s)"
	[l]="lease acquire+release, 100 live (pairs/s)" [L]="lease acquire+release, 10,000 live (pairs/s)" [k]="POST /v1/leases/{id}/keepalive (2xx/s)"
	[r]="POST /v1/locks/acquire, 100,000 reservations (2xx/s)")
for ph in $phases; do
	case $ph in f | s | h | a | m | z | l | L | k | r) ;; *) say "unknown phase $ph"; exit 2 ;; esac
	for side in "${sides[@]}"; do
		if ! supports "$side" "$ph"; then
			say "$side: phase $ph (${label[$ph]}) skipped: this binary has no such feature"
			continue
		fi
		prepare "$side" "$ph"
		# The rows phase r inserted before it are not the phase's.
		if [ "$ph" = r ]; then last[$side]=$(dbstats "$side"); fi
		say "$side: phase $ph (${label[$ph]}), ${conns} connections, ${duration}s"
		case $ph in
		f | s) run_pgbench "$side" "$ph" ;;
		*) run_wrk "$side" "$ph" ;;
		esac
		read -r s0 i0 <<<"${last[$side]}"
		last[$side]=$(dbstats "$side")
		read -r s1 i1 <<<"${last[$side]}"
		opened[$side,$ph]=$((s1 - s0))
		# Rows inserted per successful operation: shows that every key was
		# new (a conflict inserts nothing) and what one operation writes.
		inserted[$side,$ph]=$(awk -v i="$((i1 - i0))" -v n="${count[$side,$ph]:-0}" 'BEGIN {if (n > 0) printf "%.2f", i/n; else print "-"}')
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# seqscans SIDE: the tables of the side's database that sequential scans
# read over 100,000 rows of during the run, as "table (N scans, M rows)".
# A hot statement whose cached plan reads a table whole shows here
# (docs/benchmarks.md, "Plans cached on a small table"). Read after the
# last phase: the connection it opens is not counted as a phase's session.
seqscans() {
	psql "$(with_db "$admin_url" "${db_name[$1]}")" -X -Atq -c "
		SELECT coalesce(string_agg(format('%s (%s scans, %s rows)', relname, seq_scan, seq_tup_read), ', ' ORDER BY seq_tup_read DESC), 'none')
		FROM pg_stat_user_tables WHERE seq_tup_read > 100000" 2>/dev/null || echo "not read"
}
declare -A seq_note=()
for side in "${sides[@]}"; do seq_note[$side]=$(seqscans "$side"); done

# ---- report ----
ratio() { # side num den
	local n=${rate[$1,$2]:-} d=${rate[$1,$3]:-}
	if [ -z "$n" ] || [ -z "$d" ] || [ "$d" = 0.0 ]; then echo "n/a"; return; fi
	awk -v n="$n" -v d="$d" 'BEGIN {printf "%.2f", n/d}'
}
verdict() { # value op target
	[ "$1" = n/a ] && { echo "-"; return; }
	awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN {ok = (op == ">=") ? (v >= t) : (v <= t); print ok ? "PASS" : "MISS"}'
}
fmt_rate() { [ -n "${1:-}" ] && awk -v v="$1" 'BEGIN {printf "%.0f", v}' || echo "-"; }

echo
echo "make bench-http: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+dirty'), ${conns} connections, ${duration}s per phase"
if [ -n "${pg_postmaster:-}" ]; then
	echo "Postgres processes µs/op: CPU of the server's postmaster and its children (postmaster pid $pg_postmaster): every database on it counts, so use a server of the benchmark's own"
else
	echo "Postgres processes µs/op: not measured (the server is not a local process this user can read)"
fi
if [ -n "$flush_us" ]; then
	echo "disk flush: $flush_us µs per 8 KiB O_DSYNC write beside the data directory (measured before the phases; small: f is bound by CPU, not by WAL flushes)"
else
	echo "disk flush: not measured (the server's data directory is not local to this user)"
fi
echo "machine: $(nproc --all) CPUs; load average before $load_before, after $load_after; Postgres $(psql_admin -c 'SHOW server_version' | cut -d' ' -f1)"
echo "CPUs: $pin_note"
for side in "${sides[@]}"; do
	# The binary's peak resident memory over the run (VmHWM), for the
	# memory its collector's pace costs (GOGC).
	rss=$(awk '/^VmHWM:/ {printf "%.0f MiB", $2 / 1024}' "/proc/${server_pid[$side]}/status" 2>/dev/null || true)
	echo "$side: ${bin[$side]}, pool size (max open) ${pool[$side]}, peak RSS ${rss:-?}"
	echo "$side: sequential scans that read over 100,000 rows in the run: ${seq_note[$side]}"
done
echo
header="| phase |"
sep="| --- |"
for side in "${sides[@]}"; do
	header+=" $side rate | $side p50 ms | $side p99 ms | $side non-2xx/failed | $side sessions opened | $side rows inserted/op |"
	sep+=" ---: | ---: | ---: | ---: | ---: | ---: |"
done
echo "$header"
echo "$sep"
for ph in $phases; do
	line="| $ph: ${label[$ph]} |"
	for side in "${sides[@]}"; do
		line+=" $(fmt_rate "${rate[$side,$ph]:-}") | ${p50[$side,$ph]:--} | ${p99[$side,$ph]:--} | ${bad[$side,$ph]:--} | ${opened[$side,$ph]:--} | ${inserted[$side,$ph]:--} |"
	done
	echo "$line"
done
echo
# What each phase cost, per successful operation: CPU of the binary, of the
# load generator, and of the rest of the machine (Postgres and the kernel),
# and the WAL written. "busy" is the machine's busy CPUs over the phase: at
# the machine's CPU count, the phase was bound by CPU.
header="| phase |"
sep="| --- |"
for side in "${sides[@]}"; do
	header+=" $side busy CPUs | $side binary µs/op | $side load generator µs/op | $side Postgres + kernel µs/op | $side Postgres processes µs/op | $side WAL bytes/op | $side requests per batch |"
	sep+=" ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
done
echo "$header"
echo "$sep"
for ph in $phases; do
	line="| $ph |"
	for side in "${sides[@]}"; do
		line+=" $(awk -v n="${count[$side,$ph]:-0}" -v d="$duration" -v busy="${cpu_busy[$side,$ph]:-0}" -v b="${cpu_bin[$side,$ph]:-0}" \
			-v g="${cpu_gen[$side,$ph]:-0}" -v w="${wal_bytes[$side,$ph]:-0}" -v pg="${cpu_pg[$side,$ph]:-0}" -v havepg="${pg_postmaster:+1}" 'BEGIN {
				if (n == 0) { printf "- | - | - | - | - | -"; exit }
				# The kernel'"'"'s work for a process'"'"'s system calls is that
				# process'"'"'s CPU, so the rest can round to below 0.
				rest = busy - b - g; if (rest < 0) rest = 0
				pgs = havepg ? sprintf("%.0f", pg / n * 1e6) : "-"
				printf "%.2f | %.0f | %.0f | %.0f | %s | %.0f", busy / d, b / n * 1e6, g / n * 1e6, rest / n * 1e6, pgs, w / n }') | ${per_batch[$side,$ph]:--} |"
	done
	echo "$line"
done
echo
header="| target |"
sep="| --- |"
for side in "${sides[@]}"; do header+=" $side |"; sep+=" --- |"; done
echo "$header"
echo "$sep"
for spec in "h s >= 0.8" "h f >= 0.6" "a f >= 0.4" "m z >= 0.5" "l f >= 0.3" "k f >= 0.5" "r h >= 0.9"; do
	read -r n d op t <<<"$spec"
	line="| $n/$d $op $t |"
	for side in "${sides[@]}"; do
		r=$(ratio "$side" "$n" "$d")
		line+=" $r $(verdict "$r" "$op" "$t") |"
	done
	echo "$line"
done
line="| p99 L/l (acquire+release with 10,000 vs 100 live leases) <= 1.5 |"
for side in "${sides[@]}"; do
	a=${p99[$side,L]:-} b=${p99[$side,l]:-}
	if [ -z "$a" ] || [ -z "$b" ] || [ "$b" = 0.00 ]; then line+=" n/a - |"; continue; fi
	r=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a/b}')
	line+=" $r $(verdict "$r" "<=" 1.5) |"
done
echo "$line"
line="| sessions opened by the binary (h+a+m+z) <= pool size |"
for side in "${sides[@]}"; do
	total=0 any=""
	for ph in h a m z; do
		[ -n "${opened[$side,$ph]:-}" ] && { total=$((total + opened[$side,$ph])); any=1; }
	done
	p=${pool[$side]%\?}
	if [ -z "$any" ]; then line+=" n/a - |"; else line+=" $total vs ${pool[$side]} $(verdict "$total" "<=" "$p") |"; fi
done
echo "$line"
