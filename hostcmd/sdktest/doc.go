// Package sdktest runs the official @e2b/code-interpreter SDK (npm, pinned in
// package-lock.json) against a kernelhost started in-process: see sdk_test.go
// and sdk.test.mjs. `make test` installs node_modules with npm ci.
package sdktest
