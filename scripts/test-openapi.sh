#!/usr/bin/env bash
# Checks that api/openapi.yaml works with the standard generators and
# linters, each at a pinned version (make test-openapi; part of make
# test-deploy; docs/api.md#generated-clients):
#
#  1. oapi-codegen (-generate types,client, default settings) and ogen
#     (default settings) generate Go clients into api/clientcheck (a module
#     of its own; the output is not committed), which must build and vet;
#     TestOAPICodegenClient then calls three endpoints of the real binary
#     through the oapi-codegen client (on TEST_DATABASE_URL's server; skipped
#     without it);
#  2. openapi-typescript generates types that tsc --noEmit --strict accepts,
#     with api/clientcheck/ts/check.ts using them;
#  3. Redocly CLI lints the document with api/redocly.yaml (recommended-strict:
#     every operation described, license and contact, no unused component,
#     valid examples); an error names the line and the rule.
#
# Go tools come through `go run module@version` (the module proxy), the
# others through npx (the npm registry). Where one cannot be reached the
# step is skipped and the reason printed (exit status 0); REQUIRE_OPENAPI_TOOLS=1
# makes a skip a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
OAPI_CODEGEN_VERSION=${OAPI_CODEGEN_VERSION:-v2.8.2}
OGEN_VERSION=${OGEN_VERSION:-v1.24.0}
OPENAPI_TYPESCRIPT_VERSION=${OPENAPI_TYPESCRIPT_VERSION:-7.13.0}
TYPESCRIPT_VERSION=${TYPESCRIPT_VERSION:-5.9.3}
REDOCLY_VERSION=${REDOCLY_VERSION:-2.77.0}

doc=api/openapi.yaml
cc=api/clientcheck
skipped=0
say() { echo "test-openapi: $*" >&2; }
skip() {
	say "SKIP: $*"
	skipped=1
	[ "${REQUIRE_OPENAPI_TOOLS:-0}" = 1 ] && exit 1
	return 0
}
fail() { say "FAIL: $*"; exit 1; }

# --- 1. Go clients ----------------------------------------------------------
go_tools_reachable() {
	local m err
	for m in "github.com/oapi-codegen/oapi-codegen/v2@$OAPI_CODEGEN_VERSION" "github.com/ogen-go/ogen@$OGEN_VERSION"; do
		if ! err=$(cd "$cc" && timeout 300 "$GO" mod download "$m" 2>&1); then
			echo "cannot download $m (GOPROXY=$("$GO" env GOPROXY)): $(tail -n 1 <<<"$err")"
			return 1
		fi
	done
}
if why=$(go_tools_reachable); then
	mkdir -p "$cc/oapi"
	"$GO" run "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$OAPI_CODEGEN_VERSION" \
		-generate types,client -package oapi -o "$cc/oapi/client.gen.go" "$doc" ||
		fail "oapi-codegen $OAPI_CODEGEN_VERSION cannot generate a client from $doc (see above)"
	say "ok: oapi-codegen $OAPI_CODEGEN_VERSION generated $cc/oapi"
	out=$("$GO" run "github.com/ogen-go/ogen/cmd/ogen@$OGEN_VERSION" --target "$cc/ogen" --package ogen --clean "$doc" 2>&1) ||
		{ echo "$out" >&2; fail "ogen $OGEN_VERSION cannot generate a client from $doc"; }
	say "ok: ogen $OGEN_VERSION generated $cc/ogen"
	(cd "$cc" && "$GO" mod tidy -diff >/dev/null) ||
		fail "$cc/go.mod does not match the generated code: run (cd $cc && go mod tidy) after this script and commit go.mod and go.sum"
	(cd "$cc" && "$GO" vet ./...) || fail "the generated Go clients do not build or vet (see above)"
	say "ok: both Go clients build and vet"
	if [ -n "${TEST_DATABASE_URL:-}" ]; then
		(cd "$cc" && env -u DATABASE_URL "$GO" test -count=1 -run '^TestOAPICodegenClient$' ./...) ||
			fail "the oapi-codegen client against the binary (see above)"
		say "ok: the oapi-codegen client created users, acquired a lock, was refused one and listed locks on the binary"
	else
		skip "TEST_DATABASE_URL is not set: the oapi-codegen client was not run against the binary (make test-openapi sets it)"
	fi
else
	skip "Go clients not generated: $why"
fi

# --- 2 and 3: npm tools -----------------------------------------------------
npm_reachable() {
	command -v npx >/dev/null 2>&1 || { echo "no npx here (Debian: apt-get install npm)"; return 1; }
	local err
	err=$(timeout 120 npm view "@redocly/cli@$REDOCLY_VERSION" version 2>&1) ||
		{ echo "the npm registry ($(npm config get registry 2>/dev/null)) cannot be reached: $(tail -n 1 <<<"$err")"; return 1; }
}
if why=$(npm_reachable); then
	npx --yes "openapi-typescript@$OPENAPI_TYPESCRIPT_VERSION" "$doc" -o "$cc/ts/schema.d.ts" >&2 ||
		fail "openapi-typescript $OPENAPI_TYPESCRIPT_VERSION cannot generate types from $doc"
	npx --yes -p "typescript@$TYPESCRIPT_VERSION" tsc --project "$cc/ts/tsconfig.json" ||
		fail "tsc $TYPESCRIPT_VERSION rejects the types openapi-typescript generated (or $cc/ts/check.ts)"
	say "ok: openapi-typescript $OPENAPI_TYPESCRIPT_VERSION types pass tsc $TYPESCRIPT_VERSION --noEmit --strict"
	# Redocly prints a banner about Node versions on stderr; its findings go to stdout.
	npx --yes "@redocly/cli@$REDOCLY_VERSION" lint --config api/redocly.yaml --format stylish "$doc" 2>/dev/null ||
		fail "Redocly lint of $doc (each line above: line:column, rule, what is missing; operation-description names an operation without a description)"
	say "ok: Redocly $REDOCLY_VERSION lint (api/redocly.yaml) finds nothing"
else
	skip "openapi-typescript, tsc and Redocly not run: $why"
fi

if [ "$skipped" = 1 ]; then
	say "PASS with skips (above)"
else
	say "PASS"
fi
