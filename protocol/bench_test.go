package protocol

import (
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// echoServer answers every REQUEST on ch with a RESPONSE on the same stream
// (a PingReply echoing a ping) until the connection ends.
func echoServer(ch *Channel, done chan<- error) {
	var req ctxdpb.Request
	resp := &ctxdpb.Response{}
	reply := &ctxdpb.Response_Ping{Ping: &ctxdpb.PingReply{}}
	for {
		h, p, err := ch.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = nil
			}
			done <- err
			return
		}
		if err := Unmarshal(h, p, &req); err != nil {
			done <- err
			return
		}
		reply.Ping.Payload = req.GetPing().GetPayload()
		resp.Body = reply
		if err := ch.WriteMessage(h.StreamID, TypeResponse, 0, resp); err != nil {
			done <- err
			return
		}
	}
}

// BenchmarkRoundTrip measures one request/response call over a Unix
// socket: marshal and write a Ping REQUEST, the server reads, decodes and
// answers, the client reads and decodes the RESPONSE. Besides ns/op it
// reports the p50 and p99 latency of a call. Target: p50 <= 50 µs.
func BenchmarkRoundTrip(b *testing.B) {
	a, s := unixPair(b)
	client, server := NewChannel(a, 0), NewChannel(s, 0)
	done := make(chan error, 1)
	go echoServer(server, done)

	req := &ctxdpb.Request{Body: &ctxdpb.Request_Ping{Ping: &ctxdpb.PingRequest{Payload: []byte("0123456789abcdef")}}}
	var resp ctxdpb.Response
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		stream := uint32(i + 1)
		if err := client.WriteMessage(stream, TypeRequest, 0, req); err != nil {
			b.Fatal(err)
		}
		h, p, err := client.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if h.StreamID != stream || h.Type != TypeResponse {
			b.Fatalf("got %v", h)
		}
		if err := Unmarshal(h, p, &resp); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	client.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStreamToken measures one streamed token over a Unix socket: the
// server marshals and writes a DATA frame with a TokenEvent, the client
// reads and decodes it. Target: <= 20 µs per token.
func BenchmarkStreamToken(b *testing.B) {
	a, s := unixPair(b)
	client, server := NewChannel(a, 0), NewChannel(s, 0)
	tok := &ctxdpb.TokenEvent{Token: 1, Piece: " token"}
	ev := &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: tok}}
	n := b.N
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			tok.Token = int32(i)
			if err := server.WriteMessage(1, TypeData, 0, ev); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()

	var got ctxdpb.StreamEvent
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < n; i++ {
		h, p, err := client.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if err := Unmarshal(h, p, &got); err != nil {
			b.Fatal(err)
		}
		if got.GetToken().GetToken() != int32(i) {
			b.Fatalf("token %d, want %d", got.GetToken().GetToken(), i)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
