package protocol

import "fmt"

// NegotiateVersion picks the version of a connection whose client speaks
// [clientMin, clientMax]: the highest version in both that range and
// [MinProtocolVersion, ProtocolVersion]. No overlap, including an empty or
// zero range, gives an error wrapping ErrVersion that names both ranges;
// the server answers it with ERROR_CODE_VERSION and closes the connection.
func NegotiateVersion(clientMin, clientMax uint32) (uint32, error) {
	lo, hi := max(clientMin, MinProtocolVersion), min(clientMax, ProtocolVersion)
	if clientMin > clientMax || lo > hi {
		return 0, fmt.Errorf("%w: client speaks %d..%d, server speaks %d..%d",
			ErrVersion, clientMin, clientMax, MinProtocolVersion, ProtocolVersion)
	}
	return hi, nil
}
