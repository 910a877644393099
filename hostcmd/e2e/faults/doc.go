// Package faults holds the host's fault suite (TestFault*: kill -9 of an
// interpreter, a plugin, a Jupyter kernel or server; cut websockets;
// disconnecting and slow clients), the blast-radius tests (floods and
// nesting bombs one context sends) and the isolation soak. It has no code
// of its own: the fault tests are not parallel tests and check the whole
// test binary for leftovers, so they get a binary of their own (make
// test-go-faults) instead of holding up the other packages' parallel tests.
package faults
