// Compiled with openapi-typescript's output by scripts/test-openapi.sh
// (tsc --noEmit --strict): the generated types are usable, not only
// syntactically valid.
import type { components, operations, paths } from "./schema";

type Lock = components["schemas"]["Lock"];
type AcquireOK = operations["acquireLock"]["responses"][200]["content"]["application/json"];
type ListLocks = paths["/v1/locks"]["get"]["responses"][200]["content"]["application/json"];
type ErrorBody = components["schemas"]["Error"];

export function firstLock(page: ListLocks): Lock | undefined {
  return page.items[0];
}

export function claimedBy(e: ErrorBody): string | undefined {
  return e.error.code === "repository_claimed" ? e.error.owner : undefined;
}

export function acquired(a: AcquireOK): string {
  return a.normalized_url;
}
