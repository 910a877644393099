// Package docs holds kernelhost's API description: docs/openapi.json, an
// OpenAPI 3.0 document of every HTTP route and every /execute stream line.
// The file is the one source of truth; the host embeds it and serves it at
// GET /openapi.json.
package docs

import _ "embed"

//go:embed openapi.json
var openAPI string

// OpenAPI returns the OpenAPI 3.0 document (JSON) of the host's HTTP API.
func OpenAPI() string { return openAPI }
