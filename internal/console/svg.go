package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// sparkline draws values as an inline SVG polyline, w×h pixels, labelled
// for screen readers.
func sparkline(values []float64, label string) template.HTML {
	const w, h = 120.0, 24.0
	maxV := 0.0
	for _, v := range values {
		maxV = math.Max(maxV, v)
	}
	var pts strings.Builder
	for i, v := range values {
		x := 0.0
		if len(values) > 1 {
			x = float64(i) * w / float64(len(values)-1)
		}
		y := h - 1
		if maxV > 0 {
			y = h - 1 - v/maxV*(h-2)
		}
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="%s"><title>%s</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" points="%s"/></svg>`,
		w, h, w, h, template.HTMLEscapeString(label), template.HTMLEscapeString(label), strings.TrimSpace(pts.String())))
}

// latencyLines draws p50 (solid) and p99 (dashed) on one scale as an inline
// SVG, labelled for screen readers.
func latencyLines(p50, p99 []float64, label string) template.HTML {
	const w, h = 120.0, 24.0
	maxV := 0.0
	for _, v := range p99 {
		maxV = math.Max(maxV, v)
	}
	for _, v := range p50 {
		maxV = math.Max(maxV, v)
	}
	line := func(values []float64) string {
		var pts strings.Builder
		for i, v := range values {
			x := 0.0
			if len(values) > 1 {
				x = float64(i) * w / float64(len(values)-1)
			}
			y := h - 1
			if maxV > 0 {
				y = h - 1 - v/maxV*(h-2)
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		}
		return strings.TrimSpace(pts.String())
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="%s"><title>%s</title>`+
		`<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="%s"/>`+
		`<polyline fill="none" stroke="#a4141a" stroke-width="1.5" stroke-dasharray="3 2" points="%s"/></svg>`,
		w, h, w, h, template.HTMLEscapeString(label), template.HTMLEscapeString(label), line(p50), line(p99)))
}

// failureBars draws one horizontal bar per code, labelled with the code
// and count.
func failureBars(counts []codeCount) template.HTML {
	if len(counts) == 0 {
		return template.HTML(`<p class="muted">No failures since the console started.</p>`)
	}
	const barW, rowH = 240.0, 22.0
	maxN := 0
	for _, c := range counts {
		maxN = max(maxN, c.Count)
	}
	height := rowH * float64(len(counts))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="bars" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="failures by code"><title>failures by code</title>`, 420.0, height, 420.0, height)
	for i, c := range counts {
		y := float64(i) * rowH
		wd := math.Max(2, float64(c.Count)/float64(maxN)*barW)
		fmt.Fprintf(&b, `<text x="0" y="%.0f" class="bar-label">%s</text><rect x="150" y="%.0f" width="%.0f" height="%.0f" class="bar"/><text x="%.0f" y="%.0f" class="bar-label">%d</text>`,
			y+15, template.HTMLEscapeString(c.Code), y+4, wd, rowH-8, 150+wd+6, y+15, c.Count)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
