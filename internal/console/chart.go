package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// chart is a bar chart of counts per hour, drawn by the server as inline
// SVG (presentation attributes only, so the CSP needs no 'unsafe-inline'
// for styles). Bars of several series stack.
type chart struct {
	Title  string
	Total  int64
	Max    int64
	Series []series
	// SVG is drawn for a wide page; SVGNarrow for a phone (390 px): a
	// narrower, taller viewBox, so that the labels keep their size when
	// the chart is scaled to the page (the stylesheet shows one of them).
	SVG, SVGNarrow template.HTML
}

type series struct {
	Name  string
	Class string
	Total int64
}

// hourChart builds the chart of the hours hourNow-n+1 .. hourNow (Unix hours).
func hourChart(title string, hourNow int64, n int, kinds []string, rows []hourCount) chart {
	first := hourNow - int64(n) + 1
	// buckets[i][k] is the count of kinds[k] in hour first+i.
	buckets := make([][]int64, n)
	for i := range buckets {
		buckets[i] = make([]int64, len(kinds))
	}
	ch := chart{Title: title}
	totals := make([]int64, len(kinds))
	for _, r := range rows {
		i := r.Hour - first
		if i < 0 || i >= int64(n) {
			continue
		}
		for k, kind := range kinds {
			if kind == r.Event {
				buckets[i][k] += r.N
				totals[k] += r.N
				ch.Total += r.N
			}
		}
	}
	for _, b := range buckets {
		var sum int64
		for _, v := range b {
			sum += v
		}
		ch.Max = max(ch.Max, sum)
	}
	for k, kind := range kinds {
		ch.Series = append(ch.Series, series{Name: kind, Class: "s-" + kind, Total: totals[k]})
	}
	ch.SVG = drawBars(title, first, n, kinds, buckets, ch.Max, wide)
	ch.SVGNarrow = drawBars(title, first, n, kinds, buckets, ch.Max, narrow)
	return ch
}

// chartSize is a chart's viewBox.
type chartSize struct{ w, h float64 }

var (
	wide   = chartSize{1000, 150}
	narrow = chartSize{400, 190}
)

// drawBars draws the bars in a viewBox of size that scales to the page
// width.
func drawBars(title string, first int64, n int, kinds []string, buckets [][]int64, maxSum int64, size chartSize) template.HTML {
	const (
		top    = 12.0
		bottom = 22.0
		left   = 36.0
	)
	w, h := size.w, size.h
	plotH := h - top - bottom
	barW := (w - left) / float64(n)
	var b strings.Builder
	class := "chart"
	if size == narrow {
		class = "chart narrow"
	}
	fmt.Fprintf(&b, `<svg class="%s" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		class, w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(title))
	scale := maxSum
	if scale == 0 {
		scale = 1
	}
	// Axis and the maximum's gridline.
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, left, h-bottom, w, h-bottom)
	if maxSum > 0 {
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, left, top, w, top)
		fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, left-4, top+4, formatInt(maxSum))
	}
	fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f" text-anchor="end">0</text>`, left-4, h-bottom+4)
	for i, vals := range buckets {
		x := left + float64(i)*barW
		y := h - bottom
		hourStart := time.Unix((first+int64(i))*3600, 0).UTC()
		for k, v := range vals {
			if v == 0 {
				continue
			}
			bh := float64(v) / float64(scale) * plotH
			y -= bh
			fmt.Fprintf(&b, `<rect class="s-%s" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s %s: %d</title></rect>`,
				kinds[k], x+barW*0.1, y, barW*0.8, bh, hourStart.Format("2006-01-02 15:00 UTC"), kinds[k], v)
		}
		// Hour labels: every 6 hours on the day chart, every day on the week chart.
		if x < w-40 && ((n <= 24 && hourStart.Hour()%6 == 0) || (n > 24 && hourStart.Hour() == 0)) {
			label := hourStart.Format("15:00")
			if n > 24 {
				label = hourStart.Format("Jan 2")
			}
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f">%s</text>`, x, h-6, label)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
