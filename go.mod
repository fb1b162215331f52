module github.com/ctxd/ctxd

go 1.26.8

require (
	github.com/gen2brain/malgo v0.11.24
	github.com/ollama/ollama v0.17.4
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.10
)

require github.com/edsrzf/mmap-go v1.2.0
