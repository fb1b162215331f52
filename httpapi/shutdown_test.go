package httpapi

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestStreamCutBySIGTERMEndsWithError: a stream in flight when ctxd shuts
// down ends with an error event and, for OpenAI, [DONE]; before, it just
// stopped and the client could not tell a cut from an end.
func TestStreamCutBySIGTERMEndsWithError(t *testing.T) {
	for _, c := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "[DONE]"},
		{"/api/chat", `{"messages":[{"role":"user","content":"hi"}]}`, `"error"`},
	} {
		f := &scripted{pieces: []string{"hi"}, prefillDelay: 30 * time.Second}
		f.model = testmodel.Stories(t)
		s := New(f, Config{Addr: "127.0.0.1:0", Logger: testLogger(t), KeepAlive: 50 * time.Millisecond})
		ln, err := s.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Serve(ctx, ln) }()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("POST " + c.path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(c.body)) + "\r\n\r\n" + c.body))
		br := bufio.NewReader(conn)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "HTTP/1.1 200") {
			t.Fatalf("%s: %q %v", c.path, l, err)
		}
		time.Sleep(200 * time.Millisecond) // the prefill runs, keep-alive chunks flow
		cancel()                           // SIGTERM
		var all strings.Builder
		for {
			l, err := br.ReadString('\n')
			all.WriteString(l)
			if err != nil {
				break
			}
		}
		conn.Close()
		<-done
		got := all.String()
		if !strings.Contains(got, "shutting down") || !strings.Contains(got, c.want) {
			t.Errorf("%s: stream cut by shutdown ended with %q", c.path, got[max(0, len(got)-300):])
		}
	}
}

func itoa(n int) string { return fmtInt(n) }

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
