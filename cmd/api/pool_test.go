package main

import (
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// TestPoolFlags: the pool and token cache settings from the environment,
// their defaults (idle = open) and the values refused.
func TestPoolFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    database.PoolConfig
		wantErr string
	}{
		{"defaults", nil, nil, database.PoolConfig{MaxOpenConns: 20, ConnMaxLifetime: 30 * time.Minute, ConnMaxIdleTime: 5 * time.Minute}, ""},
		{"environment", map[string]string{"DB_MAX_OPEN_CONNS": "40", "DB_MAX_IDLE_CONNS": "30", "DB_CONN_MAX_LIFETIME": "1h", "DB_CONN_MAX_IDLE_TIME": "1m"}, nil,
			database.PoolConfig{MaxOpenConns: 40, MaxIdleConns: 30, ConnMaxLifetime: time.Hour, ConnMaxIdleTime: time.Minute}, ""},
		{"flag over environment", map[string]string{"DB_MAX_OPEN_CONNS": "40"}, []string{"--db-max-open-conns", "8"},
			database.PoolConfig{MaxOpenConns: 8, ConnMaxLifetime: 30 * time.Minute, ConnMaxIdleTime: 5 * time.Minute}, ""},
		{"zero open", nil, []string{"--db-max-open-conns", "0"}, database.PoolConfig{}, "--db-max-open-conns must be at least 1"},
		{"idle over open", nil, []string{"--db-max-idle-conns", "21"}, database.PoolConfig{}, "--db-max-idle-conns must be 0..--db-max-open-conns (20)"},
		{"negative lifetime", nil, []string{"--db-conn-max-lifetime", "-1s"}, database.PoolConfig{}, "must not be negative"},
		{"negative cache size", nil, []string{"--token-cache-size", "-1"}, database.PoolConfig{}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(k string) string { return tc.env[k] }}
			fs := newFlagSet(e, "serve", "", "")
			var p poolFlags
			p.register(fs)
			if _, err := fs.parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := p.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("config = %+v, %v; want %+v", got, err, tc.want)
			}
			if d := got.WithDefaults(); tc.want.MaxIdleConns == 0 && d.MaxIdleConns != d.MaxOpenConns {
				t.Fatalf("idle defaults to %d, want the open %d", d.MaxIdleConns, d.MaxOpenConns)
			}
		})
	}
}
