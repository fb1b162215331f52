package shm

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRandomOps runs random Put / replace / Delete / Get / reopen sequences
// against a model map, with Check after every step.
func TestRandomOps(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 400
	if testing.Short() {
		seeds, steps = seeds[:1], 150
	}
	for _, seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 99))
		dir := t.TempDir()
		o := small()
		o.BudgetBytes = 1<<20 + int64(rng.IntN(1<<20)) // not a multiple of anything
		a, _ := mustOpen(t, dir, o)
		model := map[uint64]Block{}
		nextID := uint64(1)
		var ver uint64
		blockFor := func(id uint64) Block {
			ver++
			var kv int
			switch rng.IntN(10) {
			case 0:
				kv = 0
			case 1:
				kv = 100_000 + rng.IntN(200_000) // many slabs
			default:
				kv = rng.IntN(30_000)
			}
			b := testBlock(ver<<32|id, rng.IntN(400), kv)
			b.ID = id
			return b
		}
		for step := range steps {
			var op string
			switch r := rng.IntN(100); {
			case r < 45:
				op = "put"
				b := blockFor(nextID)
				nextID++
				put(t, a, model, b)
			case r < 60 && len(model) > 0:
				op = "replace"
				put(t, a, model, blockFor(anyKey(rng, model)))
			case r < 85 && len(model) > 0:
				op = "delete"
				id := anyKey(rng, model)
				if err := a.Delete(id); err != nil {
					t.Fatalf("seed %d step %d: Delete %d: %v", seed, step, id, err)
				}
				delete(model, id)
			case r < 90:
				op = "delete-missing"
				if err := a.Delete(nextID + 1000); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Delete missing: %v", err)
				}
			case r < 97 && len(model) > 0:
				op = "get"
				id := anyKey(rng, model)
				verify(t, a, model[id])
			default:
				op = "reopen"
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
				var rep Report
				a, rep = mustOpen(t, dir, o)
				if !rep.Attached || rep.Blocks != len(model) || len(rep.Dropped)+len(rep.SetAside) != 0 {
					t.Fatalf("seed %d step %d: reopen: %+v", seed, step, rep)
				}
			}
			if err := a.Check(); err != nil {
				t.Fatalf("seed %d step %d (%s): %v", seed, step, op, err)
			}
			list := a.List()
			if len(list) != len(model) {
				t.Fatalf("seed %d step %d (%s): %d blocks, model %d", seed, step, op, len(list), len(model))
			}
			for _, m := range list {
				b, ok := model[m.ID]
				if !ok || m.Chain != b.Chain || m.KVBytes != int64(len(b.KV)) || m.NTokens != len(b.Tokens) {
					t.Fatalf("seed %d step %d (%s): List has %+v", seed, step, op, m)
				}
			}
			if s := a.Stats(); s.FileBytes > o.BudgetBytes {
				t.Fatalf("files %d over budget %d", s.FileBytes, o.BudgetBytes)
			}
		}
		for _, b := range model {
			verify(t, a, b)
		}
		t.Logf("seed %d: %d blocks at the end, %+v", seed, len(model), a.Stats())
		a.Close()
	}
}

// put stores b, evicting random blocks while the arena is full, and checks
// that ErrArenaFull / ErrTooLarge are only returned when they are true.
func put(t *testing.T, a *Arena, model map[uint64]Block, b Block) {
	t.Helper()
	rng := rand.New(rand.NewPCG(b.ID, 5))
	need := (streamLength(len(b.Tokens), int64(len(b.KV))) + 4095) / 4096
	for {
		before := a.Stats()
		err := a.Put(b)
		switch {
		case err == nil:
			model[b.ID] = b
			return
		case errors.Is(err, ErrTooLarge):
			if need <= before.CapacitySlabs {
				t.Fatalf("ErrTooLarge for %d slabs, capacity %d", need, before.CapacitySlabs)
			}
			return
		case errors.Is(err, ErrArenaFull):
			if before.SlabsAvailable >= need {
				t.Fatalf("ErrArenaFull for %d slabs with %d available: %v", need, before.SlabsAvailable, err)
			}
			after := a.Stats()
			after.Generation, before.Generation = 0, 0
			if after != before {
				t.Fatalf("failed Put changed the arena:\n%+v\n%+v", before, after)
			}
			if len(model) == 0 {
				t.Fatalf("ErrArenaFull on an empty arena: %v", err)
			}
			victim := anyKey(rng, model)
			if err := a.Delete(victim); err != nil {
				t.Fatal(err)
			}
			delete(model, victim)
		default:
			t.Fatalf("Put %d: %v", b.ID, err)
		}
	}
}

func anyKey(rng *rand.Rand, m map[uint64]Block) uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[rng.IntN(len(keys))]
}
