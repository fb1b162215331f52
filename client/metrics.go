package client

import (
	"context"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// MetricsOptions tune a Metrics call.
type MetricsOptions struct {
	// NoText leaves the Prometheus text out of the reply (callers that
	// only need the structured parts, such as a tracer polling the
	// arena's address ranges).
	NoText bool
}

// Metrics returns the daemon's counters, gauges and Go-side timings: the
// Prometheus text exposition, log2 histograms of its timings, the host-RAM
// arena's mapped address ranges and the daemon's pid and executable.
func (c *Client) Metrics(ctx context.Context, opts ...MetricsOptions) (Metrics, error) {
	var o MetricsOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_Metrics{Metrics: &pb.MetricsRequest{NoText: o.NoText}}}, nil)
	if err != nil {
		return Metrics{}, err
	}
	return metrics(r.GetMetrics()), nil
}
