# source env.sh: the cgo flags the Makefile computes, for running go by hand.
OD=$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)
export CGO_CPPFLAGS="-I$PWD/.build/include -I$OD/llama/llama.cpp/include -I$OD/ml/backend/ggml/ggml/include"
export CGO_CFLAGS="-O2 -march=native" CGO_CXXFLAGS="-O2 -march=native"
