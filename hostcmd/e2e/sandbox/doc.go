// Package sandbox holds the end-to-end tests of the subprocess transport's
// contexts through a whole host, linked in and through its plugin: what a
// cell in its sandbox can reach (the host's API, secrets, a cwd outside the
// writable paths), that its detached processes end with it, and contexts
// made from the warm pool and by fork. It has no code of its own: the tests
// are a package so that go test runs them as a binary of their own, beside
// hostcmd/server's.
package sandbox
