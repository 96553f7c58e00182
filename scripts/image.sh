#!/usr/bin/env bash
# Builds repolock's container image without pulling any base image: the
# static binary is built on the host and put into a FROM scratch image with
# buildah, next to the host's CA bundle. The result has the same layout,
# user, labels, entrypoint and command as the Containerfile's image.
#
#   scripts/image.sh                 # or: make image
#
# Environment:
#   IMAGE           image name (default localhost/repolock)
#   VERSION         tag and org.opencontainers.image.version
#                   (default: git describe --tags --always --dirty)
#   REVISION        org.opencontainers.image.revision (default: git rev-parse HEAD)
#   SOURCE          org.opencontainers.image.source
#   IMAGE_ARCHIVE   also write the image there as a docker-archive tarball
#                   (for `docker load` / `podman load`), e.g. bin/repolock-image.tar
#   STORAGE_DRIVER  buildah storage driver (default: buildah's own, overlay
#                   on Debian; vfs works where overlayfs does not, e.g.
#                   inside an unprivileged container). Podman must use the
#                   same driver to run the image.
#
# Prints the image reference (IMAGE:VERSION) as its last line on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "image: $*" >&2; }

ensure_buildah() {
	command -v buildah >/dev/null 2>&1 && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		log "installing buildah (apt-get)"
		scripts/apt-install.sh buildah
		return 0
	fi
	log "buildah is missing: install it (Debian/Ubuntu: apt-get install buildah) or run as root"
	exit 1
}

ensure_buildah

GO=${GO:-go}
IMAGE=${IMAGE:-localhost/repolock}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
SOURCE=${SOURCE:-https://github.com/repolock/repolock}
# No RUN steps, but keep buildah from needing a runtime if one is added.
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
buildah() { command buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if [ ! -s "$CA_BUNDLE" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		scripts/apt-install.sh ca-certificates
	fi
	[ -s "$CA_BUNDLE" ] || { log "no CA bundle at $CA_BUNDLE"; exit 1; }
fi

work=$(mktemp -d)
ctr=""
cleanup() {
	[ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# The same build as the Containerfile's, plus the VCS stamp the host's
# checkout allows (`go version -m` shows vcs.revision, vcs.modified).
log "building the static binary ($VERSION)"
# VERSION and REVISION are stamped into the binary too (internal/version),
# so GET /version says what the labels say.
vpkg=github.com/repolock/repolock/internal/version
CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=auto \
	-ldflags="-s -w -X $vpkg.version=$VERSION -X $vpkg.revision=$REVISION" -o "$work/repolock" ./cmd/api

# A minimal /etc/passwd and /etc/group, so that the numeric user has a name
# (some tools and libraries look it up); nothing else from the host.
mkdir -p "$work/etc/ssl/certs"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/etc/group"
cp "$CA_BUNDLE" "$work/etc/ssl/certs/ca-certificates.crt"

log "assembling $IMAGE:$VERSION with buildah${STORAGE_DRIVER:+ (storage driver $STORAGE_DRIVER)}"
ctr=$(buildah from scratch)
buildah copy --chown 0:0 --chmod 0755 "$ctr" "$work/repolock" /repolock >/dev/null
buildah copy --chown 0:0 --chmod 0644 "$ctr" "$work/etc/passwd" /etc/passwd >/dev/null
buildah copy --chown 0:0 --chmod 0644 "$ctr" "$work/etc/group" /etc/group >/dev/null
buildah copy --chown 0:0 --chmod 0644 "$ctr" "$work/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah config \
	--os linux --arch "$("$GO" env GOARCH)" \
	--user 65532:65532 \
	--workingdir / \
	--env LISTEN_ADDR=0.0.0.0:8080 \
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--port 8080 \
	--entrypoint '["/repolock"]' \
	--cmd serve \
	--label org.opencontainers.image.title=repolock \
	--label "org.opencontainers.image.description=Multi-tenant ownership locks on Git repository URLs" \
	--label "org.opencontainers.image.source=$SOURCE" \
	--label "org.opencontainers.image.version=$VERSION" \
	--label "org.opencontainers.image.revision=$REVISION" \
	--label org.opencontainers.image.licenses=NOASSERTION \
	"$ctr"
buildah commit --quiet --rm "$ctr" "$IMAGE:$VERSION" >/dev/null
ctr=""
buildah tag "$IMAGE:$VERSION" "$IMAGE:dev" >/dev/null

if [ -n "${IMAGE_ARCHIVE:-}" ]; then
	mkdir -p "$(dirname "$IMAGE_ARCHIVE")"
	rm -f "$IMAGE_ARCHIVE"
	buildah push --quiet "$IMAGE:$VERSION" "docker-archive:$IMAGE_ARCHIVE:$IMAGE:$VERSION" >/dev/null
	log "wrote $IMAGE_ARCHIVE"
fi
log "done: $IMAGE:$VERSION (also tagged $IMAGE:dev)"
echo "$IMAGE:$VERSION"
