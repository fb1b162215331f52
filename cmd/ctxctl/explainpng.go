package main

import (
	"fmt"
	"image/color"
	"os"
	"sort"

	"github.com/ctxd/ctxd/client"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ctxd/ctxd/policy"
)

// Colours of the picture: one per cache class, one per engine state.
var (
	classColors = map[policy.CacheClass]color.RGBA{
		policy.ClassTaskPinned: {0x4c, 0x72, 0xb0, 0xff},
		policy.ClassRepoMap:    {0x55, 0xa8, 0x68, 0xff},
		policy.ClassVolatile:   {0xdd, 0x84, 0x52, 0xff},
	}
	otherClassColor = color.RGBA{0x8c, 0x8c, 0x8c, 0xff}
	hotColor        = color.RGBA{0xc4, 0x4e, 0x52, 0xff}
	parkedColor     = color.RGBA{0xc8, 0xc8, 0xc8, 0xff}
	retrievedColor  = color.RGBA{0x81, 0x72, 0xb3, 0xff}
	emptyColor      = color.RGBA{0xf0, 0xf0, 0xf0, 0xff}
)

// The two bands, in plot units: segments on top, the engine below.
const (
	segmentsLo, segmentsHi = 1.1, 1.9
	engineLo, engineHi     = 0.1, 0.9
)

// span is a coloured range of token positions [from, to) on one band.
type span struct {
	from, to float64
	color    color.Color
	label    string // drawn inside when it fits
}

// contextBands is the plotter: the session's tokens along x, segments
// coloured by class on the upper band, engine state on the lower one.
type contextBands struct {
	total    float64
	segments []span
	engine   []span
}

func (b contextBands) DataRange() (xmin, xmax, ymin, ymax float64) { return 0, b.total, 0, 2 }

// minSpan is the narrowest a span is drawn, so a 64-token block in a
// 200k-token session still shows.
const minSpan = vg.Length(1.5)

func (b contextBands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	label := text.Style{Color: color.White, Font: font.From(plot.DefaultFont, 8), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YCenter}
	fill := func(s span, lo, hi float64) {
		x0, x1 := trX(s.from), trX(s.to)
		if w := x1 - x0; w < minSpan {
			mid := (x0 + x1) / 2
			x0, x1 = mid-minSpan/2, mid+minSpan/2
		}
		y0, y1 := trY(lo), trY(hi)
		c.FillPolygon(s.color, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		if s.label != "" && label.Width(s.label) < x1-x0-4 {
			c.FillText(label, vg.Point{X: (x0 + x1) / 2, Y: (y0 + y1) / 2}, s.label)
		}
	}
	fill(span{0, b.total, emptyColor, ""}, segmentsLo, segmentsHi)
	fill(span{0, b.total, emptyColor, ""}, engineLo, engineHi)
	for _, s := range b.segments {
		fill(s, segmentsLo, segmentsHi)
	}
	for _, s := range b.engine {
		fill(s, engineLo, engineHi)
	}
	// White rules between segments wide enough to separate.
	rule := draw.LineStyle{Color: color.White, Width: vg.Points(1)}
	for i, s := range b.segments {
		if i > 0 && trX(s.to)-trX(s.from) >= 4 {
			c.StrokeLine2(rule, trX(s.from), trY(segmentsLo), trX(s.from), trY(segmentsHi))
		}
	}
}

// swatch is a legend thumbnail: a filled box.
type swatch struct{ color color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.color, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

// explainSpans lays out the two bands of ex. Segments, the hot ranges and
// retrieved blocks are drawn where they are. A reply without hot_ranges
// (an older daemon) gives each segment's count of hot tokens but not their
// positions: then a segment's other hot tokens are drawn at its end (the
// most recent tokens, where the hot set's recent window lives) and the
// rest of it as parked.
func explainSpans(ex client.Explanation) (segs, engine []span, total float64) {
	total = float64(ex.ResidentTokens)
	for _, s := range ex.Segments {
		total = max(total, float64(s.FirstPosition+s.Tokens))
		col, ok := classColors[policy.CacheClass(s.Class)]
		if !ok {
			col = otherClassColor
		}
		segs = append(segs, span{float64(s.FirstPosition), float64(s.FirstPosition + s.Tokens), col, s.ID})
	}
	if !hotSetMode(ex) {
		if total > 0 {
			engine = append(engine, span{0, total, hotColor, "in engine"})
		}
		return segs, engine, total
	}
	if hr := ex.HotRanges; len(hr) > 0 {
		// Exact: the daemon lists the stream ranges in the engine.
		engine = append(engine, span{0, total, parkedColor, ""})
		for _, r := range hr {
			engine = append(engine, span{float64(r.Start), float64(r.End), hotColor, ""})
		}
		for _, b := range ex.Retrieved {
			engine = append(engine, span{float64(b.FirstToken), float64(b.FirstToken + b.Tokens), retrievedColor, ""})
		}
		return segs, engine, total
	}
	var retrieved [][2]int
	for _, b := range ex.Retrieved {
		retrieved = append(retrieved, [2]int{b.FirstToken, b.FirstToken + b.Tokens})
	}
	sort.Slice(retrieved, func(i, j int) bool { return retrieved[i][0] < retrieved[j][0] })
	for _, s := range ex.Segments {
		lo, hi := s.FirstPosition, s.FirstPosition+s.Tokens
		engine = append(engine, span{float64(lo), float64(hi), parkedColor, ""})
		// The segment's gaps between retrieved blocks, from its end back.
		left := s.ResidentTokens
		var gaps [][2]int
		at := lo
		for _, r := range retrieved {
			if a, b := max(r[0], lo), min(r[1], hi); a < b {
				left -= b - a
				if at < a {
					gaps = append(gaps, [2]int{at, a})
				}
				at = b
			}
		}
		if at < hi {
			gaps = append(gaps, [2]int{at, hi})
		}
		for i := len(gaps) - 1; i >= 0 && left > 0; i-- {
			n := min(left, gaps[i][1]-gaps[i][0])
			engine = append(engine, span{float64(gaps[i][1] - n), float64(gaps[i][1]), hotColor, ""})
			left -= n
		}
	}
	for _, r := range retrieved {
		engine = append(engine, span{float64(r[0]), float64(r[1]), retrievedColor, ""})
	}
	return segs, engine, total
}

func hotSetMode(ex client.Explanation) bool {
	return ex.HotTokens > 0 || ex.ParkedTokens > 0 || ex.ParkedBlocks > 0 || ex.LostBlocks > 0
}

// writeExplainPNG draws ex as a PNG file at path: the session's tokens
// along x, segments coloured by cache class on the upper band, hot,
// parked and retrieved tokens on the lower one, with a legend and a title
// naming the session and its token counts.
func writeExplainPNG(ex client.Explanation, path string) error {
	segs, engine, total := explainSpans(ex)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("session %d: %d tokens (%d generated)", ex.SessionID, ex.ResidentTokens, ex.GeneratedTokens)
	if hotSetMode(ex) {
		p.Title.Text += fmt.Sprintf(" · hot %d · parked %d · retrieved %d · protected %d",
			ex.HotTokens, ex.ParkedTokens, ex.RetrievedTokens, ex.ProtectedTokens)
	}
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "token position in the session"
	if hotSetMode(ex) && len(ex.HotRanges) == 0 {
		p.X.Label.Text += " (engine: retrieved blocks where they are; a segment's other hot tokens drawn at its end)"
	}
	p.X.Label.TextStyle.Font.Size = vg.Points(9)
	p.X.Min, p.X.Max = 0, max(total, 1)
	p.Y.Min, p.Y.Max = 0, 2
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: (engineLo + engineHi) / 2, Label: "engine"}, {Value: (segmentsLo + segmentsHi) / 2, Label: "segments"}})
	p.Y.Tick.LineStyle.Width = 0
	p.Y.LineStyle.Width = 0
	p.Add(contextBands{total: max(total, 1), segments: segs, engine: engine})

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	legend.ThumbnailWidth = vg.Points(12)
	legend.Add("segments by class")
	byClass := ex.TokensByClass
	for _, c := range []policy.CacheClass{policy.ClassTaskPinned, policy.ClassRepoMap, policy.ClassVolatile} {
		legend.Add(fmt.Sprintf("%s (%d)", c, byClass[c.String()]), swatch{classColors[c]})
	}
	for _, s := range ex.Segments {
		if _, ok := classColors[policy.CacheClass(s.Class)]; !ok {
			legend.Add("other class", swatch{otherClassColor})
			break
		}
	}
	legend.Add(" ")
	legend.Add("engine")
	if hotSetMode(ex) {
		legend.Add(fmt.Sprintf("hot (%d, incl. retrieved)", ex.HotTokens), swatch{hotColor})
		legend.Add(fmt.Sprintf("retrieved (%d)", ex.RetrievedTokens), swatch{retrievedColor})
		legend.Add(fmt.Sprintf("parked (%d)", ex.ParkedTokens), swatch{parkedColor})
	} else {
		legend.Add(fmt.Sprintf("in engine (%d)", ex.ResidentTokens), swatch{hotColor})
	}

	const legendWidth = 1.9 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(11*vg.Inch, 3.4*vg.Inch), vgimg.UseDPI(110))
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, 11*vg.Inch-legendWidth+vg.Points(8), 0, vg.Points(8), -vg.Points(30)))

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
