package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// view is what every page template receives.
type view struct {
	Title  string
	Nav    string // the active navigation entry
	CSRF   string // the session's CSRF token; "" when signed out
	Now    time.Time
	Notice string
	Error  string
	// Refresh asks console.js to reload the page every so many seconds
	// when the operator ticks "live".
	Refresh int
	// Events is the URL of the event stream console.js follows while
	// "live" is ticked (reloading the page at each change) instead of the
	// Refresh timer; "" for none.
	Events string
	Body   any
}

func (c *Console) parseTemplates() error {
	funcs := template.FuncMap{
		"when":    c.when,
		"whenPtr": c.whenPtr,
		"ago":     c.ago,
		"num":     formatInt,
		"secs":    formatSeconds,
		"deref":   derefString,
		"derefI":  derefInt,
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	c.pages = map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimPrefix(n, "templates/")
		if base == "layout.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", base, err)
		}
		c.pages[strings.TrimSuffix(base, ".html")] = t
	}
	return nil
}

// render executes page into a buffer first, so a template error is a clean
// 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, v view) {
	t, ok := c.pages[page]
	if !ok {
		panic("console: no template " + page)
	}
	v.Now = c.now()
	if s != nil {
		v.CSRF = s.CSRF
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: render", "page", page, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage renders a message with status.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.render(w, r, status, "error", s, view{Title: http.StatusText(status), Error: msg, Body: status})
}

// fail renders err: a domain error's own message and status, anything else
// a logged 500 with a generic text.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	msg, safe := userMessage(err)
	if !safe {
		c.cfg.Logger.ErrorContext(r.Context(), "console: request failed", "path", r.URL.Path, "error", err.Error())
	}
	c.errorPage(w, r, s, statusOf(err), msg)
}

// when renders a time in UTC with its distance from now.
func (c *Console) when(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time> <span class="ago">%s</span>`,
		u.Format(time.RFC3339), u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05 UTC"),
		template.HTMLEscapeString(c.ago(t))))
}

func (c *Console) whenPtr(t *time.Time) template.HTML {
	if t == nil {
		return "—"
	}
	return c.when(*t)
}

// ago is a relative time: "just now", "5 min ago", "3 h ago", "2 d ago",
// "in 4 min".
func (c *Console) ago(t time.Time) string {
	d := c.now().Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d d", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// formatInt groups thousands: 1234567 → "1,234,567".
func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatSeconds(f float64) string {
	switch {
	case f < 1:
		return fmt.Sprintf("%.0f ms", f*1000)
	case f < 120:
		return fmt.Sprintf("%.1f s", f)
	default:
		return (time.Duration(f) * time.Second).String()
	}
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int64) string {
	if p == nil {
		return "—"
	}
	return formatInt(*p)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// withParamOn returns the URL path with the request's query, key set to
// value (removed when value is ""), keeping every other filter: the stable
// URL of a list page (a POST answered with a list page links to the list's
// own GET URL).
func withParamOn(path string, r *http.Request, key, value string) string {
	q := r.URL.Query()
	if value == "" {
		q.Del(key)
	} else {
		q.Set(key, value)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// pager holds the links of a keyset-paginated list.
type pager struct {
	Param string // the query parameter that holds the position
	First string // "" on the first page
	Next  string // "" on the last page
}

func newPager(r *http.Request, tokenParam, next string) pager {
	return newPagerOn(r.URL.Path, r, tokenParam, next)
}

func newPagerOn(path string, r *http.Request, tokenParam, next string) pager {
	p := pager{Param: tokenParam}
	if r.URL.Query().Get(tokenParam) != "" {
		p.First = withParamOn(path, r, tokenParam, "")
	}
	if next != "" {
		p.Next = withParamOn(path, r, tokenParam, next)
	}
	return p
}

// pageSize reads ?page_size= (1..500), else the configured default.
func (c *Console) pageSize(r *http.Request) (int, error) {
	v := r.URL.Query().Get("page_size")
	if v == "" {
		return c.cfg.PageSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 500 {
		return 0, errBadRequest("page_size must be an integer from 1 to 500")
	}
	return n, nil
}
