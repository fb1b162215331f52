package systemd

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestJournalHandlerPrefixesPriorityAndDropsTime(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewJournalHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Debug("dbg", "k", 1)
	log.Info("model loaded", "path", "/m/x.gguf")
	log.With("conn", 7).WithGroup("g").Warn("slow", "ms", 12)
	log.Error("stopped", "err", "boom\nsecond line")
	want := []string{
		`<7>level=DEBUG msg=dbg k=1`,
		`<6>level=INFO msg="model loaded" path=/m/x.gguf`,
		`<4>level=WARN msg=slow conn=7 g.ms=12`,
		`<3>level=ERROR msg=stopped err="boom\nsecond line"`,
	}
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestJournalHandlerLevelAndReplaceAttr(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewJournalHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "secret" {
				a.Value = slog.StringValue("redacted")
			}
			return a
		},
	}))
	log.Info("hidden")
	log.Warn("shown", "secret", "pw")
	if got := buf.String(); got != "<4>level=WARN msg=shown secret=redacted\n" {
		t.Errorf("got %q", got)
	}
}

// Concurrent records keep their own prefixes.
func TestJournalHandlerConcurrent(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewJournalHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					log.Error("e")
				} else {
					log.Debug("d")
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1600 {
		t.Fatalf("%d lines, want 1600", len(lines))
	}
	for _, l := range lines {
		if l != "<3>level=ERROR msg=e" && l != "<7>level=DEBUG msg=d" {
			t.Fatalf("mixed-up line %q", l)
		}
	}
}

func TestIsJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvJournalStream, fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	if !IsJournal(f) {
		t.Error("file named by JOURNAL_STREAM not recognised")
	}
	t.Setenv(EnvJournalStream, fmt.Sprintf("%d:%d", st.Dev, st.Ino+1))
	if IsJournal(f) {
		t.Error("another inode taken for the journal")
	}
	t.Setenv(EnvJournalStream, "")
	if IsJournal(f) {
		t.Error("journal without JOURNAL_STREAM")
	}
	if IsTerminal(f) {
		t.Error("a regular file taken for a terminal")
	}
}
