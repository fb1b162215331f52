package httpapi

import (
	"context"
	"net/http"
)

// ReuseHeader lets a request ask for exact reuse: "X-Ctxd-Reuse: exact"
// keeps only KV equal to a cold prefill (no segment moved past an early
// change, nothing approximate kept from an earlier turn); "auto", or no
// header, is the daemon's --reuse mode.
const ReuseHeader = "X-Ctxd-Reuse"

type exactReuseKey struct{}

// withReuse reads ReuseHeader into the request's context; another value
// is a bad request.
func withReuse(r *http.Request) (*http.Request, error) {
	switch v := r.Header.Get(ReuseHeader); v {
	case "", "auto":
		return r, nil
	case "exact":
		return r.WithContext(context.WithValue(r.Context(), exactReuseKey{}, true)), nil
	default:
		return r, badRequest("%s: %q is not a reuse mode (auto or exact)", ReuseHeader, v)
	}
}

// exactReuse reports whether the request asked for exact reuse.
func exactReuse(ctx context.Context) bool {
	v, _ := ctx.Value(exactReuseKey{}).(bool)
	return v
}
