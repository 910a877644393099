// Package codeshape holds the test that keeps two rules of the code's shape
// (docs/RATIONALE.md, "Code shape") true as it grows: no function over 80
// lines and no exported mutable package-level state outside _test.go files.
// It has no code of its own to import.
package codeshape
