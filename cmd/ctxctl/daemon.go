package main

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/sidecar"
)

func startPrivate(model string, ctxTokens int) (*sidecar.Private, error) {
	return sidecar.StartPrivate(sidecar.Config{ModelPath: model, ContextTokens: ctxTokens, Version: "ctxctl-private"})
}

// connect dials --socket, or starts a private daemon when model is set.
func (e *env) connect(ctx context.Context, model string, ctxTokens int) (*client.Client, func(), error) {
	if model == "" {
		c, err := e.dial(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	p, err := startPrivate(model, ctxTokens)
	if err != nil {
		return nil, nil, fmt.Errorf("private daemon: %w", err)
	}
	c, err := client.Dial(ctx, p.Socket, client.Options{Name: "ctxctl"})
	if err != nil {
		p.Stop()
		return nil, nil, err
	}
	return c, func() { c.Close(); p.Stop() }, nil
}
