#!/usr/bin/env bash
# git-ensure.sh: make sure git is installed, for the normalizer's git-oracle
# tests (internal/normalize/oracle_test.go). As root with apt-get, installs
# Debian's git package; otherwise only warns (the oracle tests then skip).
set -euo pipefail
if command -v git >/dev/null 2>&1; then
	exit 0
fi
if "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" git; then
	exit 0
fi
echo "git-ensure: git is not installed; the normalizer's git-oracle tests will be skipped (Debian/Ubuntu: 'sudo apt-get install git')" >&2
