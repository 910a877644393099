package server

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
func MCPSessions(h *Host) int { return h.api.MCPSessions() }
