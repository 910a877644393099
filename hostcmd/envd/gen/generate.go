// Package gen holds the Go code generated from E2B's envd specification
// (../shared/third_party/e2b-envd-spec beside the repository): the protobuf
// messages and connect-go handlers of the Connect services
// filesystem.Filesystem (gen/filesystem, gen/filesystem/filesystemconnect)
// and process.Process (gen/process, gen/process/processconnect).
//
// Regenerate with `go generate ./hostcmd/envd/gen` (or `make generate`); it
// needs protoc on PATH (Debian: protobuf-compiler) and uses the
// protoc-gen-go and protoc-gen-connect-go versions pinned as tools in go.mod.
// The spec's protos carry no go_package option (E2B generates with buf), so
// the M options below place them in this package's subdirectories.
package gen

//go:generate sh -c "protoc -I /usr/include -I $DOLLAR{SPEC:-../../../../shared/third_party/e2b-envd-spec} --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-connect-go=$(go tool -n protoc-gen-connect-go) --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative --go_opt=Mfilesystem/filesystem.proto=github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem --connect-go_opt=Mfilesystem/filesystem.proto=github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem --go_opt=Mprocess/process.proto=github.com/kernelhost/kernelhost/hostcmd/envd/gen/process --connect-go_opt=Mprocess/process.proto=github.com/kernelhost/kernelhost/hostcmd/envd/gen/process filesystem/filesystem.proto process/process.proto"
