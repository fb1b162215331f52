package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// bench peer: one conversation replayed against another OpenAI-compatible
// server (llama-server, Ollama) and ctxd, turn by turn, one server at a
// time, so the ratio of every turn is measured under the same machine
// load. The conversation is synthetic and the same for both: a long first
// user message (the cold turn), then shorter ones (warm turns), each
// request carrying the whole history with fixed assistant replies (not the
// generated ones, which could differ), greedy, streamed.

// peerTurn is one turn's measurements on one server.
type peerTurn struct {
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	TTFTMS           float64 `json:"ttft_ms"`  // first streamed content
	TotalMS          float64 `json:"total_ms"` // the last byte
	// DecodeMSPerToken is (total − ttft) / (completion tokens − 1): the
	// time per generated token after the first.
	DecodeMSPerToken float64 `json:"decode_ms_per_token,omitempty"`
}

// peerRow is one turn on both servers and their ratios (ctxd / peer:
// below 1, ctxd is faster).
type peerRow struct {
	Turn        int      `json:"turn"`
	Peer        peerTurn `json:"peer"`
	Ctxd        peerTurn `json:"ctxd"`
	TotalRatio  float64  `json:"total_ratio"`
	TTFTRatio   float64  `json:"ttft_ratio"`
	DecodeRatio float64  `json:"decode_ratio,omitempty"`
}

// peerConfig is what one replay sends.
type peerConfig struct {
	Turns, FirstWords, TurnWords, MaxTokens int
	API                                     string // "chat" or "completions"
	Nonce                                   string // opens the conversation, so no server reuses an earlier run's cache
}

// peerServer is one side of the comparison.
type peerServer struct {
	name, base, model string
}

func benchPeer(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench peer", flag.ContinueOnError)
	url := fs.String("url", "", "the other server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8080 (llama-server) or http://127.0.0.1:11434 (Ollama)")
	peerModel := fs.String("peer-model", "", "model name sent to the other server (empty: the first of its /v1/models)")
	ctxdURL := fs.String("ctxd-url", "", "a running ctxd's HTTP API (empty: a private ctxd in this process, on --model)")
	model := fs.String("model", defaultModel(), "GGUF for the private ctxd: the file the other server loaded")
	hot := fs.String("hot", "auto", "private ctxd: --hot (auto or tokens; 0: dense)")
	ctxTokens := fs.Int("ctx", 0, "private ctxd: --ctx (0: its default)")
	threads := fs.Int("threads", policy.ThreadsAuto, "private ctxd: --threads (0: auto)")
	flash := fs.Bool("flash-attn", false, "private ctxd: --flash-attn")
	turns := fs.Int("turns", 4, "turns: the first cold, the rest warm")
	first := fs.Int("first-words", 3000, "words of the first user message (≈ 1.3 tokens each)")
	turnWords := fs.Int("turn-words", 400, "words of each later user message")
	maxTokens := fs.Int("max-tokens", 16, "tokens generated per turn (greedy)")
	api := fs.String("api", "chat", "endpoint: chat (/v1/chat/completions) or completions (/v1/completions, the history as one raw prompt)")
	nonce := fs.String("nonce", "", "the conversation's first word (empty: the time, so each run starts cold)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	if *url == "" {
		return cli.Usage(errors.New("bench peer needs --url, the other server's base URL"))
	}
	if *api != "chat" && *api != "completions" {
		return cli.Usage(fmt.Errorf("--api %q: want chat or completions", *api))
	}
	if *turns < 1 || *first < 1 || *turnWords < 1 || *maxTokens < 1 {
		return cli.Usage(errors.New("--turns, --first-words, --turn-words and --max-tokens must be positive"))
	}
	cfg := peerConfig{Turns: *turns, FirstWords: *first, TurnWords: *turnWords, MaxTokens: *maxTokens, API: *api, Nonce: *nonce}
	if cfg.Nonce == "" {
		cfg.Nonce = fmt.Sprintf("run%d", time.Now().UnixNano())
	}
	base := *ctxdURL
	if base == "" {
		hc := sidecar.Config{ContextTokens: *ctxTokens, Threads: *threads, FlashAttention: *flash, NoCold: true, HotTokens: sidecar.HotAuto}
		if *hot != "auto" {
			if _, err := fmt.Sscan(*hot, &hc.HotTokens); err != nil || hc.HotTokens < 0 {
				return cli.Usage(fmt.Errorf("--hot %q: want auto or a number of tokens", *hot))
			}
		}
		d, err := startHTTPDaemon(*model, "", withDevice(hc))
		if err != nil {
			return fmt.Errorf("private ctxd: %w", err)
		}
		defer d.stop()
		base = d.base
	}
	hc := &http.Client{}
	peer := peerServer{name: "peer", base: strings.TrimRight(*url, "/"), model: *peerModel}
	mine := peerServer{name: "ctxd", base: strings.TrimRight(base, "/")}
	for _, s := range []*peerServer{&peer, &mine} {
		if s.model == "" {
			m, err := firstModel(ctx, hc, s.base)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.model = m
		}
	}
	rows, err := runPeer(ctx, hc, peer, mine, cfg, e.NewProgress("turns", int64(cfg.Turns), ""))
	if err != nil {
		return err
	}
	if *asJSON {
		return e.PrintJSON(struct {
			Peer  string    `json:"peer"`
			Model string    `json:"peer_model"`
			API   string    `json:"api"`
			Turns []peerRow `json:"turns"`
		}{peer.base, peer.model, cfg.API, rows})
	}
	printPeer(e, peer, rows)
	return nil
}

// runPeer replays the conversation, each turn on one server then the
// other (alternating who goes first, so drift in the machine's speed
// falls on both), and returns the turns with their ratios.
func runPeer(ctx context.Context, hc *http.Client, peer, mine peerServer, cfg peerConfig, bar *cli.Progress) ([]peerRow, error) {
	conv := newPeerConversation(cfg)
	var rows []peerRow
	for turn := range cfg.Turns {
		body := conv.request(turn)
		row := peerRow{Turn: turn + 1}
		order := []*peerTurn{&row.Peer, &row.Ctxd}
		servers := []peerServer{peer, mine}
		if turn%2 == 1 {
			order[0], order[1] = order[1], order[0]
			servers[0], servers[1] = servers[1], servers[0]
		}
		for i, s := range servers {
			t, err := streamTurn(ctx, hc, s, cfg.API, body)
			if err != nil {
				bar.Clear()
				return nil, fmt.Errorf("turn %d on %s (%s): %w", turn+1, s.name, s.base, err)
			}
			*order[i] = t
		}
		row.TotalRatio = ratio(row.Ctxd.TotalMS, row.Peer.TotalMS)
		row.TTFTRatio = ratio(row.Ctxd.TTFTMS, row.Peer.TTFTMS)
		row.DecodeRatio = ratio(row.Ctxd.DecodeMSPerToken, row.Peer.DecodeMSPerToken)
		rows = append(rows, row)
		bar.Add(1)
	}
	bar.Clear()
	return rows, nil
}

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

func printPeer(e *cli.Env, peer peerServer, rows []peerRow) {
	fmt.Fprintf(e.Stdout, "peer %s (model %q) against ctxd, the same conversation, one server at a time\n", peer.base, peer.model)
	fmt.Fprintf(e.Stdout, "%4s %8s %8s | %10s %10s %6s | %10s %10s %6s | %9s %9s %6s\n",
		"turn", "prompt", "peer_pr", "ctxd_ms", "peer_ms", "ratio", "ctxd_ttft", "peer_ttft", "ratio", "ctxd_dec", "peer_dec", "ratio")
	for _, r := range rows {
		fmt.Fprintf(e.Stdout, "%4d %8d %8d | %10.1f %10.1f %6.2f | %10.1f %10.1f %6.2f | %9.1f %9.1f %6.2f\n",
			r.Turn, r.Ctxd.PromptTokens, r.Peer.PromptTokens, r.Ctxd.TotalMS, r.Peer.TotalMS, r.TotalRatio,
			r.Ctxd.TTFTMS, r.Peer.TTFTMS, r.TTFTRatio, r.Ctxd.DecodeMSPerToken, r.Peer.DecodeMSPerToken, r.DecodeRatio)
	}
	fmt.Fprintln(e.Stdout, "ratios are ctxd / peer (below 1: ctxd faster); dec: ms per generated token after the first")
}

// peerConversation is the synthetic conversation, the same for every
// server of one run.
type peerConversation struct {
	cfg   peerConfig
	users []string
}

// peerWords is the vocabulary of the synthetic messages: common English
// words, each one or two tokens in most tokenizers.
var peerWords = strings.Fields(`the a of to and in is it that was for on are with as his they be at one have this from
or had by word but what some we can out other were all there when up use your how said an each she which do their time
if will way about many then them write would like so these her long make thing see him two has look more day could go
come did number sound no most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before move right boy old too
same tell does set three want air well also play small end put home read hand port large spell add even land here must
big high such follow act why ask men change went light kind off need house picture try us again animal point mother world
near build self earth father head stand own page should country found answer school grow study still learn plant cover
food sun four between state keep eye never last let thought city tree cross farm hard start might story saw far sea draw
left late run while press close night real life few north open seem together next white children begin got walk example`)

func newPeerConversation(cfg peerConfig) *peerConversation {
	r := rand.New(rand.NewPCG(0x5eed, uint64(cfg.FirstWords)<<20^uint64(cfg.TurnWords)))
	c := &peerConversation{cfg: cfg}
	for t := range cfg.Turns {
		n := cfg.TurnWords
		if t == 0 {
			n = cfg.FirstWords
		}
		var b strings.Builder
		if t == 0 {
			b.WriteString(cfg.Nonce)
		} else {
			fmt.Fprintf(&b, "Turn %d.", t+1)
		}
		for i := range n {
			b.WriteByte(' ')
			b.WriteString(peerWords[r.IntN(len(peerWords))])
			if i%17 == 16 {
				b.WriteByte('.')
			}
		}
		c.users = append(c.users, b.String())
	}
	return c
}

// assistantReply is the fixed reply that stands in the history after
// user turn t.
func assistantReply(t int) string {
	return fmt.Sprintf("Understood, part %d is noted and I will keep it in mind.", t+1)
}

// request is turn t's request body (without model and stream settings,
// which streamTurn adds).
func (c *peerConversation) request(t int) map[string]any {
	if c.cfg.API == "completions" {
		var b strings.Builder
		for i := range t + 1 {
			fmt.Fprintf(&b, "User: %s\nAssistant:", c.users[i])
			if i < t {
				fmt.Fprintf(&b, " %s\n", assistantReply(i))
			}
		}
		return map[string]any{"prompt": b.String(), "max_tokens": c.cfg.MaxTokens, "temperature": 0}
	}
	msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
	for i := range t + 1 {
		msgs = append(msgs, map[string]string{"role": "user", "content": c.users[i]})
		if i < t {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": assistantReply(i)})
		}
	}
	return map[string]any{"messages": msgs, "max_tokens": c.cfg.MaxTokens, "temperature": 0}
}
