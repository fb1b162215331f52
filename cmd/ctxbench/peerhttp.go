package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"
)

// streamTurn sends one turn to s, streamed with usage, and times the first
// content and the end of the stream.
func streamTurn(ctx context.Context, hc *http.Client, s peerServer, api string, body map[string]any) (peerTurn, error) {
	req := maps.Clone(body)
	req["model"] = s.model
	req["stream"] = true
	req["stream_options"] = map[string]any{"include_usage": true}
	b, err := json.Marshal(req)
	if err != nil {
		return peerTurn{}, err
	}
	path := "/v1/chat/completions"
	if api == "completions" {
		path = "/v1/completions"
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(b))
	if err != nil {
		return peerTurn{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := hc.Do(hr)
	if err != nil {
		return peerTurn{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return peerTurn{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	var t peerTurn
	pieces := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			break
		}
		var ev streamChunk
		if err := json.Unmarshal(data, &ev); err != nil {
			return peerTurn{}, fmt.Errorf("a stream event is not JSON: %w", err)
		}
		if ev.Error != nil {
			return peerTurn{}, fmt.Errorf("stream error: %s", ev.Error.Message)
		}
		for _, c := range ev.Choices {
			if c.Text+c.Delta.Content == "" {
				continue
			}
			if pieces == 0 {
				t.TTFTMS = msSince(t0)
			}
			pieces++
		}
		if ev.Usage != nil {
			t.PromptTokens, t.CompletionTokens = ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return peerTurn{}, err
	}
	t.TotalMS = msSince(t0)
	if t.CompletionTokens == 0 {
		t.CompletionTokens = pieces // a server without usage in its stream
	}
	if pieces == 0 {
		return peerTurn{}, errors.New("the stream carried no content")
	}
	if t.CompletionTokens > 1 {
		t.DecodeMSPerToken = (t.TotalMS - t.TTFTMS) / float64(t.CompletionTokens-1)
	}
	return t, nil
}

// streamChunk is what bench peer reads of a streamed OpenAI chunk, chat or
// completions.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func msSince(t0 time.Time) float64 { return float64(time.Since(t0).Microseconds()) / 1000 }

// firstModel is the first model id of base's /v1/models.
func firstModel(ctx context.Context, hc *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", errors.New("GET /v1/models lists no model; pass --peer-model")
	}
	return list.Data[0].ID, nil
}
