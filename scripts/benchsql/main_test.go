package main

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/lib/pq"

	"github.com/repolock/repolock/internal/dbtest"
)

// TestProxyRecordsExecutedStatements drives lib/pq (the binary's driver)
// through the proxy against the real Postgres: prepared statements, unnamed
// statements with arguments and simple queries are recorded with their SQL
// and parameter values, in order, and only while recording is on.
func TestProxyRecordsExecutedStatements(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dbtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := startProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.ln.Close()
	u.Host = p.ln.Addr().String()
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	prepared, err := db.PrepareContext(ctx, `SELECT $1::text || $3::int, $2::bytea`)
	if err != nil {
		t.Fatal(err)
	}
	defer prepared.Close()
	var a string
	var b []byte
	// Not recorded: before start.
	if err := prepared.QueryRowContext(ctx, "x", []byte{1}, 1).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}

	p.rec.start()
	if err := prepared.QueryRowContext(ctx, "github.com/o/r", []byte{0xde, 0xad}, 7).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT length($1::text)`, "abc").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	got := p.rec.stop()
	if _, err := db.ExecContext(ctx, `SELECT 2`); err != nil { // not recorded: after stop
		t.Fatal(err)
	}

	if a != "github.com/o/r7" || string(b) != "\xde\xad" || n != 3 {
		t.Fatalf("results through the proxy: %q %x %d", a, b, n)
	}
	want := []stmt{
		{SQL: `SELECT $1::text || $3::int, $2::bytea`, Params: []param{{Value: []byte("github.com/o/r")}, {Value: []byte(`\xdead`)}, {Value: []byte("7")}}},
		{SQL: `SELECT length($1::text)`, Params: []param{{Value: []byte("abc")}}},
		{SQL: `SELECT 1`},
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %d statements, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].SQL != want[i].SQL || len(got[i].Params) != len(want[i].Params) {
			t.Fatalf("statement %d = %+v, want %+v", i+1, got[i], want[i])
		}
		for j := range want[i].Params {
			// Compared in the text form pgbench sends (a bytea may travel
			// as text or binary).
			if got[i].Params[j].text() != want[i].Params[j].text() {
				t.Errorf("statement %d parameter %d = %+v, want %+v", i+1, j+1, got[i].Params[j], want[i].Params[j])
			}
		}
	}
}

func TestWriteScript(t *testing.T) {
	t.Parallel()
	key := "github.com/o/r"
	tests := []struct {
		name        string
		stmts       []stmt
		wantScript  string
		wantDefines string
		wantErr     string
	}{
		{
			name: "token lookup and lock insert",
			stmts: []stmt{
				{SQL: "SELECT id FROM api_tokens WHERE token_hash = $1", Params: []param{{Value: []byte{0xab, 0x01}, Binary: true}}},
				{SQL: "INSERT INTO locks (url, v, owner) VALUES ($1, $2::int, $3) ON CONFLICT DO NOTHING;", Params: []param{{Value: []byte(key)}, {Value: []byte("1")}, {Value: []byte("u-1")}}},
			},
			wantScript: "SELECT id FROM api_tokens WHERE token_hash = :s1_p1;\n" +
				"INSERT INTO locks (url, v, owner) VALUES (:k, :s2_p2::int, :s2_p3) ON CONFLICT DO NOTHING;\n",
			wantDefines: "s1_p1=\\xab01\ns2_p2=1\ns2_p3=u-1\n",
		},
		{
			name: "a batch of one acquire: the key as a one-element array",
			stmts: []stmt{{SQL: "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[])) SELECT 1",
				Params: []param{{Value: []byte(`{"` + key + `"}`)}, {Value: []byte(`{"2"}`)}, {Value: []byte(`{"u-1"}`)}}}},
			wantScript:  "WITH input AS (SELECT * FROM unnest(ARRAY[:k]::text[], :s1_p2::text[], :s1_p3::uuid[])) SELECT 1;\n",
			wantDefines: "s1_p2={\"2\"}\ns1_p3={\"u-1\"}\n",
		},
		{
			name:        "ten parameters",
			stmts:       []stmt{{SQL: "SELECT $10, $1", Params: []param{{Value: []byte(key)}, {Value: []byte("2")}, {Value: []byte("3")}, {Value: []byte("4")}, {Value: []byte("5")}, {Value: []byte("6")}, {Value: []byte("7")}, {Value: []byte("8")}, {Value: []byte("9")}, {Value: []byte("ten")}}}},
			wantScript:  "SELECT :s1_p10, :k;\n",
			wantDefines: "s1_p2=2\ns1_p3=3\ns1_p4=4\ns1_p5=5\ns1_p6=6\ns1_p7=7\ns1_p8=8\ns1_p9=9\ns1_p10=ten\n",
		},
		{name: "no statement carries the key", stmts: []stmt{{SQL: "SELECT $1", Params: []param{{Value: []byte("other")}}}}, wantErr: "no executed statement carried"},
		{name: "pgbench variable syntax in the SQL", stmts: []stmt{{SQL: "SELECT $1, ':a'", Params: []param{{Value: []byte(key)}}}}, wantErr: "pgbench would read as a variable"},
		{name: "placeholder without parameter", stmts: []stmt{{SQL: "SELECT $1, $2", Params: []param{{Value: []byte(key)}}}}, wantErr: "uses $2 but has 1 parameters"},
		{name: "NULL parameter", stmts: []stmt{{SQL: "SELECT $1, $2", Params: []param{{Value: []byte(key)}, {}}}}, wantErr: "is NULL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			stmts := make([]stmt, len(tt.stmts))
			for i, s := range tt.stmts {
				stmts[i] = replaceKey(stmt{SQL: s.SQL, Params: append([]param(nil), s.Params...)}, key)
			}
			err := writeScript(dir, stmts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			script, _ := os.ReadFile(filepath.Join(dir, "s.sql"))
			var body strings.Builder // the statements, without the "-- " header
			for _, line := range strings.SplitAfter(string(script), "\n") {
				if !strings.HasPrefix(line, "-- ") {
					body.WriteString(line)
				}
			}
			if body.String() != tt.wantScript {
				t.Errorf("s.sql statements:\n%s\nwant:\n%s", body.String(), tt.wantScript)
			}
			defines, _ := os.ReadFile(filepath.Join(dir, "s.defines"))
			if string(defines) != tt.wantDefines {
				t.Errorf("s.defines = %q, want %q", defines, tt.wantDefines)
			}
		})
	}
}
