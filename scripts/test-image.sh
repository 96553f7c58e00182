#!/usr/bin/env bash
# Tests the container image `make image` builds (scripts/image.sh):
#
#  1. inspection (always, needs buildah): entrypoint ["/repolock"], cmd ["serve"],
#     numeric non-root user 65532:65532, LISTEN_ADDR=0.0.0.0:8080, the OCI
#     labels (source, version, revision = this checkout's HEAD), exactly the
#     expected files (no shell), a static -trimpath binary whose `version`
#     matches the labels, size under MAX_IMAGE_MB;
#  2. a run (where a container runtime works here): podman starts the image
#     read-only, with all capabilities dropped and no new privileges, on the
#     host network against the local Postgres (its own database, dropped at
#     the end), waits for /readyz, checks that GET /version matches the
#     labels, calls an admin route, runs `gc` once in a
#     second container, and stops the server with SIGTERM expecting exit 0.
#     When no runtime can start a container here, step 2 is skipped and the
#     reason is printed (exit status stays 0); set REQUIRE_RUN=1 to make
#     that a failure.
#
# Environment: IMAGE_REF (test this image instead of building one),
# TEST_DATABASE_URL (admin URL of the Postgres to use; default: what
# scripts/pg-ensure.sh finds), MAX_IMAGE_MB (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-image: FAIL: $*" >&2; exit 1; }
ok() { echo "test-image: ok: $*" >&2; }
skip() {
	echo "test-image: SKIP: $*" >&2
	[ "${REQUIRE_RUN:-0}" = 1 ] && exit 1
	exit 0
}

MAX_IMAGE_MB=${MAX_IMAGE_MB:-30}
buildah() { command buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }

# --- 1. build (unless given) and inspect ------------------------------------
if [ -z "${IMAGE_REF:-}" ]; then
	IMAGE_REF=$(scripts/image.sh | tail -n 1)
fi
echo "test-image: testing $IMAGE_REF" >&2
insp() { buildah inspect --type image --format "$1" "$IMAGE_REF"; }

[ "$(insp '{{.OCIv1.Config.Entrypoint}}')" = "[/repolock]" ] || fail "entrypoint is $(insp '{{.OCIv1.Config.Entrypoint}}'), want [/repolock]"
[ "$(insp '{{.OCIv1.Config.Cmd}}')" = "[serve]" ] || fail "cmd is $(insp '{{.OCIv1.Config.Cmd}}'), want [serve]"
[ "$(insp '{{.OCIv1.Config.User}}')" = "65532:65532" ] || fail "user is '$(insp '{{.OCIv1.Config.User}}')', want 65532:65532"
# (grep -q on a variable, not a pipe: under pipefail, grep -q quitting early
# would fail the pipe with SIGPIPE.)
env_list=$(insp '{{range .OCIv1.Config.Env}}{{println .}}{{end}}')
grep -qx 'LISTEN_ADDR=0.0.0.0:8080' <<<"$env_list" || fail "LISTEN_ADDR=0.0.0.0:8080 is not in the image's environment: $env_list"
ok "entrypoint [/repolock], cmd [serve], user 65532:65532, LISTEN_ADDR=0.0.0.0:8080"

label() { insp "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$1\"}}"; }
[ -n "$(label source)" ] || fail "label org.opencontainers.image.source is empty"
[ -n "$(label version)" ] || fail "label org.opencontainers.image.version is empty"
if [ -z "${IMAGE_REVISION:-}" ] && git rev-parse HEAD >/dev/null 2>&1; then
	IMAGE_REVISION=$(git rev-parse HEAD)
fi
[ "$(label revision)" = "${IMAGE_REVISION:-$(label revision)}" ] || fail "label revision is $(label revision), want $IMAGE_REVISION"
[ -n "$(label revision)" ] || fail "label org.opencontainers.image.revision is empty"
ok "labels source=$(label source) version=$(label version) revision=$(label revision)"

ctr=$(buildah from --pull-never "$IMAGE_REF")
cleanup_ctr() { buildah umount "$ctr" >/dev/null 2>&1 || true; buildah rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup_ctr EXIT
root=$(buildah mount "$ctr")
files=$(cd "$root" && find . \( -type f -o -type l \) | sort | tr '\n' ' ')
want='./etc/group ./etc/passwd ./etc/ssl/certs/ca-certificates.crt ./repolock '
[ "$files" = "$want" ] || fail "image files are: $files; want: $want"
[ "$(stat -c '%a %u' "$root/repolock")" = "755 0" ] || fail "/repolock is $(stat -c '%a %u' "$root/repolock"), want 755 owned by root"
bi=$(go version -m "$root/repolock")
grep -q $'build\tCGO_ENABLED=0' <<<"$bi" || fail "the binary is not built with CGO_ENABLED=0"
grep -q $'build\t-trimpath=true' <<<"$bi" || fail "the binary is not built with -trimpath"
vcs=$(grep $'build\tvcs.revision=' <<<"$bi" | cut -d= -f2 || true)
# The version the binary reports must be the labels' (stamped at link time,
# internal/version): run the image's binary on this host (it is static; the
# same architecture unless IMAGE_REF was built for another).
bin_version="" bin_revision=""
if out=$("$root/repolock" version 2>/dev/null); then
	bin_version=$(sed -n '1s/.* //p' <<<"$out")
	bin_revision=$(sed -nE 's/^revision ([^ ]+).*/\1/p' <<<"$out")
fi
size=$(du -sb "$root" | cut -f1)
cleanup_ctr
trap - EXIT
[ "$size" -le $((MAX_IMAGE_MB * 1024 * 1024)) ] || fail "image content is $size bytes, more than ${MAX_IMAGE_MB} MB"
ok "files: $files(no shell); static -trimpath binary${vcs:+ stamped vcs.revision=$vcs}; $((size / 1024)) KiB"
if [ -n "$bin_version" ]; then
	[ "$bin_version" = "$(label version)" ] || fail "the binary's version is $bin_version, the label's $(label version)"
	[ "$bin_revision" = "$(label revision)" ] || fail "the binary's revision is $bin_revision, the label's $(label revision)"
	ok "'/repolock version' says version $bin_version, revision $bin_revision: the labels'"
else
	echo "test-image: the image's binary does not run on this host ($(uname -m)): its version is checked through GET /version below, where podman runs it" >&2
fi

# --- 2. run it ---------------------------------------------------------------
if ! command -v podman >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-image: installing podman and runc (apt-get)" >&2
		scripts/apt-install.sh podman runc ||
			skip "podman could not be installed"
	else
		skip "no podman here (and not root with apt-get to install it): the image was inspected but not run"
	fi
fi
podman() { command podman ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }

# Podman raises the container's nofile/nproc limits by default; a VM or a
# container may forbid that (setrlimit: operation not permitted). Lower
# limits are always allowed and plenty for this test.
run_opts=(--network host --read-only --cap-drop ALL --security-opt no-new-privileges
	--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
# The default runtime (crun on Debian) first, then runc, which also works on
# hosts with hybrid cgroups (crun refuses those).
runtime_opts=()
probe_err=""
if ! probe_err=$(podman run --rm --pull never "${run_opts[@]}" "$IMAGE_REF" --help 2>&1); then
	if ! command -v runc >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		scripts/apt-install.sh runc || true
	fi
	if command -v runc >/dev/null 2>&1 && podman --runtime runc run --rm --pull never "${run_opts[@]}" "$IMAGE_REF" --help >/dev/null 2>&1; then
		runtime_opts=(--runtime runc)
	else
		skip "podman cannot start a container here: $(tail -n 1 <<<"$probe_err")"
	fi
fi
ok "podman runs the image${runtime_opts:+ (${runtime_opts[*]})}: '/repolock --help' exits 0"
pod() { podman "${runtime_opts[@]}" "$@"; }

admin_url=${TEST_DATABASE_URL:-$(scripts/pg-ensure.sh)}
command -v psql >/dev/null 2>&1 || fail "psql is needed to create the test database"
db="repolock_image_test_$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# Swap the database name in the URL's path (keeping the query string).
db_url=$(sed -E "s#^([a-z]+://[^/]*)/[^?]*#\1/$db#" <<<"$admin_url")
[[ $db_url == *"/$db"* ]] || db_url="${admin_url%%\?*}/$db"
name="repolock-test-$db"
token="rla_test_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cleanup() {
	pod rm -f "$name" >/dev/null 2>&1 || true
	psql "$admin_url" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
psql "$admin_url" -qc "CREATE DATABASE \"$db\"" >/dev/null

# Port 0: the server picks a free port and logs it ("listening", addr).
pod run -d --pull never --name "$name" "${run_opts[@]}" \
	-e DATABASE_URL="$db_url" -e ADMIN_TOKEN="$token" -e LISTEN_ADDR=127.0.0.1:0 \
	"$IMAGE_REF" >/dev/null

addr=""
for _ in $(seq 1 600); do
	logs=$(pod logs "$name" 2>&1)
	addr=$(sed -nE 's/.*"msg":"listening","addr":"([^"]+)".*/\1/p' <<<"$logs")
	addr=${addr%%$'\n'*}
	[ -n "$addr" ] && break
	[ "$(pod inspect --format '{{.State.Running}}' "$name")" = true ] || { pod logs "$name" >&2; fail "the server exited before listening"; }
	sleep 0.1
done
[ -n "$addr" ] || { pod logs "$name" >&2; fail "the server did not log its address within 60s"; }

code=""
for _ in $(seq 1 300); do
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/readyz" || true)
	[ "$code" = 200 ] && break
	sleep 0.1
done
[ "$code" = 200 ] || { pod logs "$name" >&2; fail "/readyz answered $code, want 200"; }
ok "the server migrated its database and /readyz answers 200 on $addr"

[ "$(curl -s "http://$addr/healthz")" = '{"status":"ok"}' ] || fail "/healthz body is not {\"status\":\"ok\"}"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://$addr/v1/admin/users")
[ "$code" = 200 ] || fail "GET /v1/admin/users with the admin token answered $code, want 200"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/v1/admin/users")
[ "$code" = 401 ] || fail "GET /v1/admin/users without a token answered $code, want 401"
ok "/healthz, admin token accepted (200), missing token refused (401)"

ver=$(curl -s "http://$addr/version")
grep -q "\"version\":\"$(label version)\"" <<<"$ver" || fail "GET /version is $ver: want version $(label version) (the label)"
grep -q "\"revision\":\"$(label revision)\"" <<<"$ver" || fail "GET /version is $ver: want revision $(label revision) (the label)"
ok "GET /version says version $(label version), revision $(label revision): the labels'"

out=$(pod run --rm --pull never "${run_opts[@]}" -e DATABASE_URL="$db_url" "$IMAGE_REF" gc 2>/dev/null) ||
	fail "'gc' in the image exited non-zero"
grep -q '"status": *"succeeded"' <<<"$out" || fail "'gc' did not succeed: $out"
ok "'gc' (the CronJob's command) succeeds in the image"

pod stop --time 30 "$name" >/dev/null
rc=$(pod inspect --format '{{.State.ExitCode}}' "$name")
[ "$rc" = 0 ] || { pod logs "$name" >&2; fail "the server exited with $rc after SIGTERM, want 0"; }
logs=$(pod logs "$name" 2>&1)
grep -q '"msg":"stopped"' <<<"$logs" || fail "the server did not log a graceful stop"
ok "SIGTERM: graceful stop, exit 0"
echo "test-image: PASS" >&2
