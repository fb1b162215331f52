package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
)

const snapshotUsage = `usage: ctxctl snapshot save NAME [--session ID] [--json]
       ctxctl snapshot restore NAME [--generate N] [--json]
       ctxctl snapshot ls [--json]
       ctxctl snapshot rm NAME
       ctxctl snapshot verify [--json]`

func cmdSnapshot(ctx context.Context, e *cli.Env, args []string) error {
	if len(args) == 0 {
		return cli.Usage(errors.New(snapshotUsage))
	}
	sub := map[string]func(context.Context, *cli.Env, []string) error{
		"save": snapshotSave, "restore": snapshotRestore, "ls": snapshotList, "rm": snapshotRemove, "verify": snapshotVerify,
	}[args[0]]
	if sub == nil {
		return cli.Usage(fmt.Errorf("unknown snapshot command %q\n%s", args[0], snapshotUsage))
	}
	return sub(ctx, e, args[1:])
}

// nameArg takes the NAME before or after the flags.
func nameArg(fs *flag.FlagSet, e *cli.Env, args []string) (string, error) {
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return "", err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" {
		return "", cli.Usage(fmt.Errorf("a snapshot NAME is required\n%s", snapshotUsage))
	}
	return name, nil
}

// namedClient parses a snapshot command's NAME and flags and dials the
// daemon.
func namedClient(ctx context.Context, e *cli.Env, fs *flag.FlagSet, args []string) (string, *client.Client, error) {
	name, err := nameArg(fs, e, args)
	if err != nil {
		return "", nil, err
	}
	c, err := e.Dial(ctx)
	return name, c, err
}

func snapshotSave(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("snapshot save", flag.ContinueOnError)
	id := fs.Uint64("session", 0, "session id (0: the most recently used)")
	asJSON := fs.Bool("json", false, "print JSON")
	name, c, err := namedClient(ctx, e, fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.Snapshot(ctx, *id, name)
	if err != nil {
		return err
	}
	if *asJSON {
		return e.PrintJSON(map[string]any{
			"name": r.Name, "session_id": r.SessionID, "tokens": r.Tokens, "blocks": r.Blocks, "new_blocks": r.NewBlocks,
			"raw_bytes": r.RawBytes, "compressed_bytes": r.CompressedBytes, "save_ms": ms(r.Elapsed),
		})
	}
	fmt.Fprintf(e.Stdout, "saved %s: session %d, %d tokens in %d blocks (%d new, %.1f MiB raw → %.1f MiB written) in %.1f ms\n",
		r.Name, r.SessionID, r.Tokens, r.Blocks, r.NewBlocks, mib(r.RawBytes), mib(r.CompressedBytes), ms(r.Elapsed))
	return nil
}

func snapshotRestore(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("snapshot restore", flag.ContinueOnError)
	gen := fs.Int("generate", 0, "greedy tokens to generate after the restore")
	asJSON := fs.Bool("json", false, "print JSON")
	name, c, err := namedClient(ctx, e, fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	s, _, err := c.OpenSessionOptions(ctx, client.SessionOptions{Name: "ctxctl restore " + name, Cold: true})
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	start := time.Now()
	pctx, done := e.CallProgress(ctx, "restore "+name)
	rep, err := s.Restore(pctx, name)
	done()
	if err != nil {
		return err
	}
	restoreMS := ms(time.Since(start))
	var toks []int32
	text := ""
	if *gen > 0 {
		res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: *gen}, func(t client.Token) error {
			toks = append(toks, t.ID)
			return nil
		})
		if err != nil {
			return err
		}
		text = res.Text
	}
	if *asJSON {
		return e.PrintJSON(map[string]any{
			"name": name, "restore_ms": restoreMS, "tokens": toks, "text": text, "report": rep,
		})
	}
	fmt.Fprintf(e.Stdout, "restored %s: %d tokens in %.1f ms (%d blocks restored, %d tokens recomputed; %s)\n",
		name, rep.Tokens, restoreMS, rep.RestoredBlocks, rep.RecomputedTokens, rep.Choice)
	if *gen > 0 {
		fmt.Fprintf(e.Stdout, "tokens %v\ntext %q\n", toks, text)
	}
	return nil
}

func snapshotList(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("snapshot ls", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	r, err := cli.Query(ctx, e, fs, args, func(c *client.Client) (client.SnapshotList, error) { return c.Snapshots(ctx) })
	if err != nil {
		return err
	}
	if *asJSON {
		return e.PrintJSON(r)
	}
	cs := r.Cold
	if !cs.Enabled {
		fmt.Fprintf(e.Stdout, "SSD tier off: %s\n", cs.Unavailable)
		return nil
	}
	fmt.Fprintf(e.Stdout, "SSD tier %s: %d blocks, %.1f MiB (%.1f MiB raw) of quota %.1f MiB\n",
		cs.Dir, cs.Blocks, mib(cs.Bytes), mib(cs.RawBytes), mib(cs.QuotaBytes))
	if u := cs.Unavailable; u != "" {
		fmt.Fprintf(e.Stdout, "standing aside: %s\n", u)
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "name\tcreated\tmode\ttokens\tblocks\tMiB\tcompatible")
	for _, s := range r.Snapshots {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%.1f\t%v\n", s.Name, s.Created.Format(time.DateTime),
			s.Mode, s.Tokens, s.Blocks, mib(s.Bytes), s.Compatible)
	}
	return w.Flush()
}

func snapshotRemove(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("snapshot rm", flag.ContinueOnError)
	name, c, err := namedClient(ctx, e, fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.DeleteSnapshot(ctx, name)
}

// errProblems makes snapshot verify exit non-zero when files are bad.
var errProblems = errors.New("the SSD tier has bad files")

func snapshotVerify(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("snapshot verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	r, err := cli.Query(ctx, e, fs, args, func(c *client.Client) (client.ColdVerification, error) { return c.VerifyCold(ctx) })
	if err != nil {
		return err
	}
	if *asJSON {
		if err := e.PrintJSON(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "checked %d blocks and %d snapshots: %d problems\n", r.BlocksChecked, r.SnapshotsChecked, len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(e.Stdout, "  %s: %s: %s\n", p.Path, p.Kind, p.Error)
		}
	}
	if len(r.Problems) > 0 {
		return fmt.Errorf("%w: %d (set aside, never loaded)", errProblems, len(r.Problems))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mib(b int64) float64 { return float64(b) / (1 << 20) }
