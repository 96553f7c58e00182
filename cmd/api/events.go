package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/pglisten"
	"github.com/repolock/repolock/internal/watch"
)

// runEvents prints lock events from the database (internal/watch, the
// reader GET /v1/events serves): the events after --after, and with
// --follow every event as it is committed, until interrupted. Without
// --after it starts at the current end of the stream.
func runEvents(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "events", "",
		"Prints lock events in the watch's order (docs/watch.md): after --after (a cursor), or from now on.\n"+
			"Without --follow it prints what is there and, on stderr, the cursor to resume from.")
	var common commonFlags
	common.register(fs, usesPool|usesMigrateURL)
	after := fs.String("after", "", "the cursor to resume from (an event's cursor, or the one printed last); empty: now")
	kinds := fs.String("kinds", "", "comma-separated kinds: "+strings.Join(watch.Kinds, ", ")+" (default all)")
	user := fs.String("user", "", "only the events a tenant's token would see (default all: the admin's view)")
	follow := fs.Bool("follow", false, "keep printing events as they are committed, until interrupted")
	asJSON := fs.Bool("json", false, "one JSON object per event (with its cursor) instead of columns")
	retention := fs.Duration("event-retention", fs.envDuration("EVENT_RETENTION", gc.DefaultEventRetention), "the event retention the GC enforces: older cursors are expired; negative: never [EVENT_RETENTION]")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	var ks []string
	for _, k := range strings.Split(*kinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			ks = append(ks, k)
		}
	}
	if err := watch.ValidateKinds(ks); err != nil {
		return &exitError{code: 2, err: err}
	}
	if *retention == 0 {
		*retention = gc.DefaultEventRetention
	}
	logger, db, err := common.connect(ctx, e)
	if err != nil {
		return err
	}
	defer db.Close()
	sc := watch.Admin
	if *user != "" {
		svc, err := loadServices(ctx, db)
		if err != nil {
			return err
		}
		u, err := svc.tenants.GetByName(ctx, *user)
		if err != nil {
			return err
		}
		sc = watch.Scope{TenantID: u.ID}
	}
	w := watch.New(db, watch.Config{Retention: *retention, Logger: logger})
	if *follow {
		listenURL := common.databaseURL
		if u := common.db.migrationURL(); u != "" {
			listenURL = u // a session of its own, not through a pooler
		}
		l := pglisten.New(pglisten.Config{URL: listenURL, Logger: logger})
		l.Subscribe(watch.NotifyChannel, pglisten.Subscriber{Notify: w.Notify, State: w.SetListening})
		w.Start(ctx)
		defer w.Close()
		l.Start()
		defer l.Close()
	}
	cursor := *after
	for {
		changed := w.Changed()
		p, err := w.Read(ctx, sc, cursor, ks, watch.MaxPageSize)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, ev := range p.Events {
			if *asJSON {
				b, err := json.Marshal(ev)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, string(b))
			} else {
				who := ev.Actor
				if ev.Owner != "" && ev.Owner != ev.Actor {
					who += " -> " + ev.Owner
				}
				// The Application or Credential the event names.
				what := ""
				switch {
				case ev.Application != "":
					what = "  application " + ev.Application
				case ev.Credential != "":
					what = "  credential " + ev.Credential
				}
				fmt.Fprintf(e.stdout, "%s  %-9s  %s  %s%s\n", ev.At.UTC().Format(time.RFC3339), ev.Kind, ev.NormalizedURL, strings.TrimSpace(who), what)
			}
		}
		cursor = p.Cursor
		if len(p.Events) == watch.MaxPageSize {
			continue
		}
		if !*follow {
			fmt.Fprintf(e.stderr, "cursor: %s\n", cursor)
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			fmt.Fprintf(e.stderr, "cursor: %s\n", cursor)
			return nil
		}
	}
}
