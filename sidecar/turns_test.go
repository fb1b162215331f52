package sidecar

import (
	"context"
	"testing"
	"time"
)

// TestTurnsServeLeastUsedFirst: the engine goes to the waiter whose
// session used it least recently, not to the first in line, and the
// holder is owed nothing by a waiter that used more. Before, turns were
// first come, first served, and a short turn beside a long prefill waited
// a quantum of it at each of its calls.
func TestTurnsServeLeastUsedFirst(t *testing.T) {
	var tr turns
	long, short := &usage{}, &usage{}
	now := time.Now()
	long.add(30*time.Second, now) // a long prefill's recent use
	short.add(20*time.Millisecond, now)

	if err := tr.acquireAs(context.Background(), long); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	go func() { tr.acquireAs(context.Background(), long); got <- "long"; tr.release() }()
	waitWaiters(t, &tr, 1)
	go func() { tr.acquireAs(context.Background(), short); got <- "short"; tr.release() }()
	waitWaiters(t, &tr, 2)
	if !tr.owed(time.Hour) {
		t.Error("a waiter that used under half the holder's time is not owed the engine at once")
	}
	tr.release()
	if first := <-got; first != "short" {
		t.Errorf("the engine went to %q first, want the short turn (it arrived second but used far less)", first)
	}
	<-got

	// A short turn holding the engine owes nothing to the long call.
	if err := tr.acquireAs(context.Background(), short); err != nil {
		t.Fatal(err)
	}
	go func() { tr.acquireAs(context.Background(), long); tr.release() }()
	waitWaiters(t, &tr, 1)
	if tr.owed(0) {
		t.Error("a short turn is owed to a waiter that used far more")
	}
	tr.release()
}

func waitWaiters(t *testing.T, tr *turns, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		k := len(tr.waiters)
		tr.mu.Unlock()
		if k == n {
			return
		}
	}
	t.Fatalf("never %d waiters", n)
}
