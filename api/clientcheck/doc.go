// Package clientcheck proves that api/openapi.yaml works with the standard
// client generators. It is its own module, so that the generated code and
// the generators' runtimes (oapi-codegen's, ogen's) stay out of the main
// module's dependencies.
//
// scripts/test-openapi.sh (make test-openapi, part of make test-deploy)
// generates, with pinned versions:
//
//   - oapi/: oapi-codegen -generate types,client (default settings);
//   - ogen/: ogen (default settings);
//   - ts/schema.d.ts: openapi-typescript, checked by tsc --noEmit with
//     ts/check.ts;
//
// none of them committed (.gitignore), then builds and vets this module and
// runs TestOAPICodegenClient, which calls the real binary through the
// oapi-codegen client. Without the generated packages this module does not
// compile: run the script, not go test, here.
package clientcheck
