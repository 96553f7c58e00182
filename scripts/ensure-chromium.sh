#!/usr/bin/env bash
# Prints the path of a Chromium for the browser tests (make test-ui).
# Installs Debian's chromium package when none is found and we can (root and
# apt-get present); otherwise prints nothing and explains why on stderr, and
# exits 0 so that callers can skip the browser tests with a clear message.
set -u
for c in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome; do
	if [ -n "$c" ] && [ -x "$c" ]; then
		echo "$c"
		exit 0
	fi
done
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: no chromium found and apt-get is not available; browser tests will be skipped" >&2
	exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO="sudo -n"
	else
		echo "ensure-chromium: no chromium found and not root (no passwordless sudo); install it with: apt-get install -y chromium" >&2
		exit 0
	fi
fi
echo "ensure-chromium: installing Debian's chromium package..." >&2
if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2 &&
	[ -x /usr/bin/chromium ]; then
	echo /usr/bin/chromium
	exit 0
fi
echo "ensure-chromium: installing chromium failed; browser tests will be skipped" >&2
exit 0
