// Package transportpb holds the generated protobuf and gRPC code of the
// transport plugin protocol (transport.proto). Only
// transportplugin/internal/pluginrpc imports it; plugin authors never see
// these types.
//
// Regenerate with `go generate ./plugins/transportplugin/proto` (or `make
// generate`); it needs protoc on PATH (Debian: protobuf-compiler) and uses the
// protoc-gen-go and protoc-gen-go-grpc versions pinned as tools in go.mod.
package transportpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative transport.proto"
