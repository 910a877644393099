package docs_test

import (
	"context"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/kernelhost/kernelhost/docs"
)

// The document is valid OpenAPI 3.0 as kin-openapi reads it, with every
// $ref resolved; hostcmd/server's tests check it against the real routes
// and real traffic.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData([]byte(docs.OpenAPI()))
	if err != nil {
		t.Fatalf("load docs/openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.json is not a valid OpenAPI document: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Fatalf("openapi version %q: the tests and the nullable/discriminator keywords assume 3.0.3", doc.OpenAPI)
	}
}

// Every line schema in the stream's oneOf is reachable through the
// discriminator mapping under the value its "type" enum allows, and the
// other way round, so a reader that dispatches on "type" finds each one.
func TestStreamLineDiscriminatorIsComplete(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData([]byte(docs.OpenAPI()))
	if err != nil {
		t.Fatalf("load docs/openapi.json: %v", err)
	}
	line := doc.Components.Schemas["StreamLine"].Value
	mapping := line.Discriminator.Mapping
	if len(line.OneOf) != len(mapping) {
		t.Fatalf("StreamLine has %d oneOf schemas but %d mapping entries", len(line.OneOf), len(mapping))
	}
	for _, ref := range line.OneOf {
		typ := ref.Value.Properties["type"].Value
		if len(typ.Enum) != 1 {
			t.Fatalf("%s: its type property must allow exactly one value, has %v", ref.Ref, typ.Enum)
		}
		value, _ := typ.Enum[0].(string)
		if got := mapping[value].Ref; got != ref.Ref {
			t.Errorf("discriminator maps %q to %q, want %q", value, got, ref.Ref)
		}
		if !slices.Contains(ref.Value.Required, "type") {
			t.Errorf("%s does not require type", ref.Ref)
		}
	}
}
