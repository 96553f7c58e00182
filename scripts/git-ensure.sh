#!/usr/bin/env bash
# git-ensure.sh: make sure git is installed, for the normalizer's git-oracle
# tests (internal/normalize/oracle_test.go). As root with apt-get, installs
# Debian's git package; otherwise only warns (the oracle tests then skip).
set -euo pipefail
if command -v git >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "git-ensure: installing Debian's git for the normalizer oracle tests" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >&2
	exit 0
fi
echo "git-ensure: git is not installed; the normalizer's git-oracle tests will be skipped (Debian/Ubuntu: 'sudo apt-get install git')" >&2
