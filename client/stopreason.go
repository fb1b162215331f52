package client

import (
	"fmt"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// StopReason says why a Decode ended.
type StopReason int

// Stop reasons, as the daemon reports them.
const (
	// StopUnknown: the daemon sent no reason (a failed call) or one this
	// client does not know.
	StopUnknown StopReason = iota
	// StopMaxTokens: DecodeOptions.MaxTokens tokens were generated.
	StopMaxTokens
	// StopEOG: the model generated an end-of-generation token.
	StopEOG
	// StopString: the text ended with one of DecodeOptions.Stop.
	StopString
	// StopCancelled: the caller cancelled (context or onToken error).
	StopCancelled
	// StopContextFull: the session's context has no room for another token.
	StopContextFull
)

var stopReasonNames = [...]string{
	StopUnknown:     "unknown",
	StopMaxTokens:   "max_tokens",
	StopEOG:         "end_of_generation",
	StopString:      "stop_string",
	StopCancelled:   "cancelled",
	StopContextFull: "context_full",
}

// String returns the reason's name as PROTOCOL.md spells it without its
// prefix: "max_tokens", "end_of_generation", "stop_string", "cancelled",
// "context_full" (or "unknown").
func (r StopReason) String() string {
	if r >= 0 && int(r) < len(stopReasonNames) {
		return stopReasonNames[r]
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// stopReasonFromWire decodes the daemon's reason.
func stopReasonFromWire(r pb.StopReason) StopReason {
	switch r {
	case pb.StopReason_STOP_REASON_MAX_TOKENS:
		return StopMaxTokens
	case pb.StopReason_STOP_REASON_END_OF_GENERATION:
		return StopEOG
	case pb.StopReason_STOP_REASON_STOP_STRING:
		return StopString
	case pb.StopReason_STOP_REASON_CANCELLED:
		return StopCancelled
	case pb.StopReason_STOP_REASON_CONTEXT_FULL:
		return StopContextFull
	}
	return StopUnknown
}
