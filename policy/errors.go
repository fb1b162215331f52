package policy

import "errors"

// ErrInvalidCapacityInput reports a CapacityInput that cannot be planned:
// non-positive model dimensions, negative sizes, an unknown KV type or
// memory kind, or sizes that overflow int64.
var ErrInvalidCapacityInput = errors.New("policy: invalid capacity input")

// ErrInsufficientMemory reports that the measured memory cannot hold the
// model weights, the overhead and the KV cache asked for.
var ErrInsufficientMemory = errors.New("policy: insufficient memory")

// ErrInvalidManifest reports a manifest or segment that breaks one of the
// rules checked by Manifest.Validate or Segment.Validate.
var ErrInvalidManifest = errors.New("policy: invalid manifest")

// ErrUnknownName reports a name that ParseKVType, ParseSegmentKind or
// ParseCacheClass does not recognise.
var ErrUnknownName = errors.New("policy: unknown name")
