#!/usr/bin/env bash
# Tests `make install` (scripts/install.sh) the way docs/operations.md
# tells an operator to run it, into temporary roots instead of /:
#
#  - the files land where the docs say, with the modes they say (the
#    binary as repolock, the env file 0600), and the binary runs;
#  - a second install keeps an edited env file;
#  - `systemd-analyze verify --root=` accepts the three units with no
#    warning at all (unknown keys and bad values are only warnings there, so
#    any output fails the test; a broken copy proves that this catches them),
#    with Debian's own units copied into the root as on a real host;
#  - `systemd-analyze security --offline` rates both services at most
#    MAX_EXPOSURE (default 2.0; 0 is best, 10 worst);
#  - PREFIX=/usr rewrites the units' paths and still verifies.
#
# Without systemd-analyze (and no root/apt-get to install Debian's systemd)
# the systemd checks are skipped with the reason; the file checks still run.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXPOSURE=${MAX_EXPOSURE:-2.0}
fail() { echo "test-install: FAIL: $*" >&2; exit 1; }
ok() { echo "test-install: ok: $*" >&2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"

# --- the documented command, with DESTDIR ------------------------------------
make --no-print-directory install DESTDIR="$root" PREFIX=/usr/local >/dev/null 2>"$work/install.log" ||
	{ cat "$work/install.log" >&2; fail "make install failed"; }

check_file() { # path mode
	[ -f "$root$1" ] || fail "$1 was not installed"
	[ "$(stat -c '%a' "$root$1")" = "$2" ] || fail "$1 has mode $(stat -c '%a' "$root$1"), want $2"
}
check_file /usr/local/bin/repolock 755
check_file /etc/systemd/system/repolock.service 644
check_file /etc/systemd/system/repolock-gc.service 644
check_file /etc/systemd/system/repolock-gc.timer 644
check_file /etc/repolock/repolock.env 600
check_file /usr/local/share/doc/repolock/operations.md 644
[ ! -e "$root/usr/local/bin/api" ] || fail "the binary was also installed as api"
"$root/usr/local/bin/repolock" --help >/dev/null 2>&1 || fail "the installed binary does not run (--help)"
grep -qx 'ExecStart=/usr/local/bin/repolock serve' "$root/etc/systemd/system/repolock.service" || fail "repolock.service does not run /usr/local/bin/repolock serve"
grep -qx 'ExecStart=/usr/local/bin/repolock gc' "$root/etc/systemd/system/repolock-gc.service" || fail "repolock-gc.service does not run /usr/local/bin/repolock gc"
ok "make install DESTDIR=... PREFIX=/usr/local: binary as repolock (runs), 3 units 0644, /etc/repolock/repolock.env 0600, docs"

echo 'DATABASE_URL=postgres://edited' >>"$root/etc/repolock/repolock.env"
make --no-print-directory install DESTDIR="$root" PREFIX=/usr/local >/dev/null 2>&1 || fail "second make install failed"
grep -qx 'DATABASE_URL=postgres://edited' "$root/etc/repolock/repolock.env" || fail "a second install overwrote the edited env file"
ok "a second install keeps the edited env file"

# PREFIX=/usr: the paths in the units follow.
usr="$work/usr-root"
make --no-print-directory install DESTDIR="$usr" PREFIX=/usr >/dev/null 2>&1 || fail "make install PREFIX=/usr failed"
[ -x "$usr/usr/bin/repolock" ] || fail "PREFIX=/usr: no /usr/bin/repolock"
grep -qx 'ExecStart=/usr/bin/repolock serve' "$usr/etc/systemd/system/repolock.service" || fail "PREFIX=/usr: ExecStart not rewritten"
grep -q '/usr/local' "$usr/etc/systemd/system/"* && fail "PREFIX=/usr: a unit still names /usr/local"
ok "PREFIX=/usr: /usr/bin/repolock, units rewritten"

# --- systemd ------------------------------------------------------------------
if ! command -v systemd-analyze >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-install: installing systemd for systemd-analyze (apt-get)" >&2
		scripts/apt-install.sh systemd || true
	fi
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "test-install: SKIP systemd checks: no systemd-analyze here (and it could not be installed)" >&2
	echo "test-install: PASS (files only)" >&2
	exit 0
fi
sysunits=""
for d in /usr/lib/systemd/system /lib/systemd/system; do
	[ -f "$d/sysinit.target" ] && { sysunits=$d; break; }
done
[ -n "$sysunits" ] || fail "no systemd unit directory with sysinit.target on this host"

# A root as on a Debian host: the system's own units (targets the units
# depend on) plus what make install put there.
with_system_units() {
	mkdir -p "$1/usr/lib/systemd"
	cp -a "$sysunits" "$1/usr/lib/systemd/system"
}
with_system_units "$root"
with_system_units "$usr"

units=(/etc/systemd/system/repolock.service /etc/systemd/system/repolock-gc.service /etc/systemd/system/repolock-gc.timer)
verify() { # root: fails on a non-zero exit or on any output
	local out rc=0
	out=$(systemd-analyze verify --root="$1" "${units[@]}" 2>&1) || rc=$?
	if [ "$rc" != 0 ] || [ -n "$out" ]; then
		echo "$out" >&2
		return 1
	fi
}
verify "$root" || fail "systemd-analyze verify found problems in the installed units"
verify "$usr" || fail "systemd-analyze verify found problems in the PREFIX=/usr units"
ok "systemd-analyze verify --root: the 3 units, no warnings ($(systemd-analyze --version | head -n 1))"

# The check must see mistakes systemd only warns about.
broken="$work/broken"
cp -a "$root" "$broken"
sed -i 's/^ProtectHome=yes$/ProtectHomee=yes/' "$broken/etc/systemd/system/repolock.service"
verify "$broken" 2>/dev/null && fail "verify did not report an unknown key"
rm "$broken/usr/local/bin/repolock"
sed -i 's/^ProtectHomee=yes$/ProtectHome=yes/' "$broken/etc/systemd/system/repolock.service"
verify "$broken" 2>/dev/null && fail "verify did not report a missing binary"
ok "verify reports an unknown key and a missing binary (negative checks)"

for svc in repolock.service repolock-gc.service; do
	# --threshold takes tenths (the 0-100 scale behind the 0.0-10.0 shown).
	out=$(systemd-analyze security --offline=yes --root="$root" \
		--threshold="$(awk -v x="$MAX_EXPOSURE" 'BEGIN { printf "%d", x * 10 + 0.5 }')" "/etc/systemd/system/$svc" 2>&1) ||
		{ echo "$out" >&2; fail "$svc: exposure above $MAX_EXPOSURE"; }
	ok "$svc: $(grep -o 'Overall exposure level.*' <<<"$out")"
done
echo "test-install: PASS" >&2
