// Package ctxdpb holds the protobuf messages of the ctxd wire protocol.
//
// ctxd.proto is the source of truth; ctxd.pb.go is generated from it with
// protoc and protoc-gen-go (run `go generate ./protocol/ctxdpb` after editing
// the schema and commit both files). Every frame payload is one of Request,
// Response or StreamEvent; see PROTOCOL.md at the repository root.
//
// Versioning rule: fields and enum values are only ever added. A field number
// or enum value, once published, is never renumbered, reused or retyped;
// removed fields are marked reserved.
package ctxdpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go env GOPATH)/bin/protoc-gen-go --go_out=. --go_opt=paths=source_relative ctxd.proto"
