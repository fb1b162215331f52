package policy

import "time"

// The capacity rules of the tiers below the engine and the running
// estimates the daemon keeps, written once here (the daemon's shell only
// measures and applies them).

// UsableShareArena and FreeShareSSD are the shares of what the machine
// has that the tiers take when no size is configured.
const (
	UsableShareArena = 4 // the host-RAM arena: a quarter of usable memory
	FreeShareSSD     = 4 // the SSD tier's quota: a quarter of the free disk
	// DefaultSSDQuota is the quota when the free space cannot be measured.
	DefaultSSDQuota = 1 << 30
)

// ArenaBudget is the host-RAM arena's size: configured when positive,
// else a quarter of usable memory (MemAvailable); at least 1 byte when
// memory is known.
func ArenaBudget(configured, usable int64) int64 {
	if configured > 0 {
		return configured
	}
	if usable <= 0 {
		return 0
	}
	return max(usable/UsableShareArena, 1)
}

// SSDQuota is the SSD tier's quota: configured when positive, else a
// quarter of the free space where it lives (free < 0: unknown, 1 GiB).
func SSDQuota(configured, free int64) int64 {
	switch {
	case configured > 0:
		return configured
	case free < 0:
		return DefaultSSDQuota
	}
	return max(free/FreeShareSSD, 1)
}

// SwitchCostEstimate updates the running mean of what switching the engine
// between sessions costs (policy.EngineQuantum's input) with one
// measurement: three parts the old estimate, one part the new, so one
// slow switch moves it by a quarter.
func SwitchCostEstimate(old, measured time.Duration) time.Duration {
	return (3*old + measured) / 4
}

// MinReadBPS is the slowest the SSD tier is believed to read (1 MB/s): a
// restore of a few bytes in a long time does not make the estimate absurd.
const MinReadBPS = 1e6

// ReadRateEstimate updates the running estimate of the SSD tier's read
// rate (bytes per second) with a restore that read bytes in d: the mean of
// the old estimate and the new rate (at least MinReadBPS). A measurement
// of nothing keeps the old estimate.
func ReadRateEstimate(old float64, bytes int64, d time.Duration) float64 {
	if bytes <= 0 || d <= 0 {
		return old
	}
	return 0.5*old + 0.5*max(float64(bytes)/d.Seconds(), MinReadBPS)
}
