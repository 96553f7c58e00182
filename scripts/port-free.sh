#!/usr/bin/env bash
# port-free.sh HOST:PORT: exit 0 when nothing listens on HOST:PORT (make run
# checks before it prints the admin token), 1 when something does.
set -euo pipefail
addr=${1:?usage: port-free.sh HOST:PORT}
host=${addr%:*}
port=${addr##*:}
[ -n "$host" ] || host=127.0.0.1
[ "$host" = "0.0.0.0" ] && host=127.0.0.1
host=${host#[}; host=${host%]}
[ "$port" = "0" ] && exit 0
# bash's /dev/tcp connects: success means a listener answers.
if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
	exit 1
fi
exit 0
