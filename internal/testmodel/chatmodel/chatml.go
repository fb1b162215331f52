package chatmodel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/gguf"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// Markers are the ChatML control tokens ChatML gives its model.
var Markers = []string{"<|im_start|>", "<|im_end|>"}

// ChatML writes, in a temporary folder, a copy of stories260K whose last
// vocabulary entries are Markers as control tokens (token type 3)
// and whose tokenizer.chat_template is tmpl: a real model with a chat
// template and control tokens, small enough for every test. It returns the
// path and the markers' token ids.
func ChatML(t testing.TB, tmpl string) (string, []int32) {
	t.Helper()
	src := testmodel.Stories(t)
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	kvs := make([]gguf.KV, 0, len(f.KV)+1)
	for _, kv := range f.KV {
		switch kv.Key {
		case "tokenizer.chat_template":
			continue
		case "tokenizer.ggml.tokens", "tokenizer.ggml.token_type":
			arr, ok := kv.Value.(gguf.Array)
			if !ok || len(arr.Items) < 2*len(Markers) {
				t.Fatalf("%s: %s is no array", src, kv.Key)
			}
			items := append([]any(nil), arr.Items...)
			for i, m := range Markers {
				id := len(items) - len(Markers) + i
				if kv.Key == "tokenizer.ggml.tokens" {
					items[id] = m
					ids = append(ids, int32(id))
				} else {
					items[id] = int32(3) // LLAMA_TOKEN_TYPE_CONTROL
				}
			}
			kv.Value = gguf.Array{Elem: arr.Elem, Items: items}
		}
		kvs = append(kvs, kv)
	}
	kvs = append(kvs, gguf.KV{Key: "tokenizer.chat_template", Value: tmpl})
	if len(ids) != len(Markers) {
		t.Fatalf("%s has no tokenizer.ggml.tokens", src)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(t.TempDir(), "stories260K-chatml.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := gguf.NewWriter(out, kvs, f.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		r, err := f.TensorData(in, ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, ids
}
