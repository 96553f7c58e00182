#!/usr/bin/env bash
# Installs repolock on a host with systemd (what `make install` runs):
#
#   $BINDIR/repolock                          the binary (built from ./cmd/api)
#   $UNITDIR/repolock.service                 `repolock serve`
#   $UNITDIR/repolock-gc.service, .timer      `repolock gc` every 10 minutes
#   $SYSCONFDIR/repolock/repolock.env         settings, mode 0600 (kept if present)
#   $DOCDIR/operations.md
#
# Every path is prefixed with $DESTDIR (staging for packages and tests).
# Nothing is started: see docs/operations.md for the next steps.
#
# Environment (make passes its variables): BIN (the binary to install,
# default bin/repolock), DESTDIR, PREFIX (/usr/local), BINDIR ($PREFIX/bin),
# DOCDIR ($PREFIX/share/doc/repolock), SYSCONFDIR (/etc), UNITDIR
# (/etc/systemd/system).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/repolock}
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
BINDIR=${BINDIR:-$PREFIX/bin}
DOCDIR=${DOCDIR:-$PREFIX/share/doc/repolock}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}

[ -x "$BIN" ] || { echo "install: no binary at $BIN (make build)" >&2; exit 1; }
case "$PREFIX$BINDIR$DOCDIR$SYSCONFDIR$UNITDIR" in
*'|'*) echo "install: paths must not contain '|'" >&2; exit 1 ;;
esac

say() { echo "install: $*" >&2; }

install -d -m 0755 "$DESTDIR$BINDIR" "$DESTDIR$UNITDIR" "$DESTDIR$DOCDIR"
install -m 0755 "$BIN" "$DESTDIR$BINDIR/repolock"
say "$DESTDIR$BINDIR/repolock"

# The units name the default paths; rewrite them for other PREFIX/SYSCONFDIR.
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for unit in repolock.service repolock-gc.service repolock-gc.timer; do
	sed -e "s|/usr/local/bin/repolock|$BINDIR/repolock|g" \
		-e "s|/usr/local/share/doc/repolock|$DOCDIR|g" \
		-e "s|/etc/repolock/|$SYSCONFDIR/repolock/|g" \
		"deploy/systemd/$unit" >"$tmp"
	install -m 0644 "$tmp" "$DESTDIR$UNITDIR/$unit"
	say "$DESTDIR$UNITDIR/$unit"
done

# Settings hold secrets: root only (systemd reads them before dropping to
# the service's dynamic user). An existing file is the operator's: kept.
install -d -m 0755 "$DESTDIR$SYSCONFDIR/repolock"
envfile="$DESTDIR$SYSCONFDIR/repolock/repolock.env"
if [ -e "$envfile" ]; then
	say "$envfile exists: kept (the current example is deploy/systemd/repolock.env.example)"
else
	install -m 0600 deploy/systemd/repolock.env.example "$envfile"
	say "$envfile (example: edit DATABASE_URL and ADMIN_TOKEN)"
fi

install -m 0644 docs/operations.md "$DESTDIR$DOCDIR/operations.md"
say "$DESTDIR$DOCDIR/operations.md"

if [ -z "$DESTDIR" ]; then
	cat >&2 <<EOM
install: next steps (docs/operations.md):
  edit $SYSCONFDIR/repolock/repolock.env (DATABASE_URL, ADMIN_TOKEN)
  systemctl daemon-reload
  systemctl enable --now repolock.service repolock-gc.timer
EOM
fi
