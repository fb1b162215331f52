package httpapi

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// deadlineBody bounds the time to read a request body (BodyTimeout): the
// connection's read deadline is set when the handler starts and cleared
// once the body is read to its end, so a response streams for
// as long as it needs while a client that trickles its body is cut off.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func newDeadlineBody(w http.ResponseWriter, body io.ReadCloser, d time.Duration) io.ReadCloser {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return body // not a net/http connection (tests): nothing to bound
	}
	return &deadlineBody{ReadCloser: body, rc: rc}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF { // on any other error the connection is not reused: the deadline stays
		b.once.Do(func() { b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}
