#!/usr/bin/env bash
# apt-install.sh PKG...: install Debian packages that a target needs, the way
# a fresh machine (CI, a new developer) needs it: as root with apt-get, after
# one `apt-get update` (package lists on a new machine are missing or stale).
# Packages already installed are not touched. Exits non-zero when a package
# cannot be installed (not root, no apt-get, or apt refused); callers decide
# whether that is a skip or a failure.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "apt-install: need ${missing[*]}, but this is not root with apt-get" >&2
	exit 1
fi
echo "apt-install: installing ${missing[*]} (apt-get)" >&2
# One update per machine boot is enough; a stamp keeps repeated calls fast.
stamp=/tmp/.repolock-apt-updated
if [ ! -e "$stamp" ] || [ -n "$(find /var/lib/apt/lists -maxdepth 0 -newer "$stamp" 2>/dev/null)" ] || [ "$(find "$stamp" -mmin +360 2>/dev/null)" ]; then
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	touch "$stamp"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
