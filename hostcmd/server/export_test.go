package server

// RouteTable lists the routes the API registers, as "METHOD /pattern", for
// the OpenAPI tests of package server_test.
func RouteTable() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.method + " " + rt.pattern
	}
	return out
}

// MaxTimeoutSeconds is the largest "timeout" an /execute body may give.
const MaxTimeoutSeconds = maxTimeoutSeconds

// WithoutKernelEnv makes the hosts started until restore is called send no
// kernel setup (kernelpy's check, and its source to a kernel without it),
// for benchmarks that compare the two; the subprocess driver loads the
// environment itself all the same. Not for parallel tests: it swaps a
// package variable.
func WithoutKernelEnv() (restore func()) {
	saved := kernelSetup
	kernelSetup = nil
	return func() { kernelSetup = saved }
}

// MCPSessions counts the sessions open on h's /mcp.
func MCPSessions(h *Host) int {
	n := 0
	for range h.api.mcp.server.Sessions() {
		n++
	}
	return n
}
