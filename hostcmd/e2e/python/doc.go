// Package python holds the end-to-end tests of kernelhost's python kernel
// environment (transports/kernelpy) through a whole host: charts, data and
// images over HTTP on the subprocess transport and on Jupyter, the chart
// corpus, parity with upstream IPython, a broken environment reported, and
// IPython's cell syntax. It has no code of its own: the tests are a package
// so that go test runs them as a binary of their own, beside hostcmd/server's.
package python
