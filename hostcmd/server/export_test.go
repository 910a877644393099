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

// PluginEnv is the environment the host adds for its transport plugin.
var PluginEnv = pluginEnv
