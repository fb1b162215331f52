package main

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/sidecar"
)

// privateClient starts a private daemon with cfg and connects to it; done
// closes both.
func privateClient(ctx context.Context, cfg sidecar.Config) (c *client.Client, done func(), err error) {
	p, err := sidecar.StartPrivate(withDevice(cfg))
	if err != nil {
		return nil, nil, err
	}
	if c, err = client.Dial(ctx, p.Socket, client.Options{Name: "ctxbench"}); err != nil {
		p.Stop()
		return nil, nil, err
	}
	return c, func() { c.Close(); p.Stop() }, nil
}

func startPrivate(model string, ctxTokens int) (*sidecar.Private, error) {
	return sidecar.StartPrivate(withDevice(sidecar.Config{ModelPath: model, ContextTokens: ctxTokens, Version: "ctxbench-private", NoCold: true}))
}

// connect dials --socket, or starts a private daemon when model is set.
func connect(ctx context.Context, e *cli.Env, model string, ctxTokens int) (*client.Client, func(), error) {
	if model == "" {
		c, err := e.Dial(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	c, done, err := privateClient(ctx, sidecar.Config{ModelPath: model, ContextTokens: ctxTokens, Version: "ctxbench-private"})
	if err != nil {
		return nil, nil, fmt.Errorf("private daemon: %w", err)
	}
	return c, done, nil
}
