package policy

import "fmt"

// formatBytes renders n bytes for messages, e.g. "27.5 GiB" or "640 B".
func formatBytes(n int64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
		tib = 1 << 40
	)
	switch {
	case n >= tib || n <= -tib:
		return fmt.Sprintf("%.1f TiB", float64(n)/tib)
	case n >= gib || n <= -gib:
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	case n >= mib || n <= -mib:
		return fmt.Sprintf("%.1f MiB", float64(n)/mib)
	case n >= kib || n <= -kib:
		return fmt.Sprintf("%.1f KiB", float64(n)/kib)
	}
	return fmt.Sprintf("%d B", n)
}
