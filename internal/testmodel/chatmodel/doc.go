// Package chatmodel writes, for tests, a real model with a chat template
// and control tokens: a copy of stories260K (found by package testmodel)
// whose last vocabulary entries are ChatML's control tokens. It lives
// apart from testmodel because it reads and writes GGUF (internal/gguf),
// whose own tests use testmodel.
package chatmodel
