// Package jupyter holds the end-to-end tests and benchmarks of a whole host
// on the Jupyter transport (real Jupyter Servers and a Kernel Gateway, the
// transport linked in and through its plugin). It has no code of its own:
// the tests are a package so that go test runs them as a binary of their
// own, beside hostcmd/server's.
package jupyter
