package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/gc"
)

func runClean(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "clean", "",
		"Runs the repository Cleaner alone (the data of deleted repository instances), under the same\n"+
			"lease as repolock gc and recorded in gc_runs with kind \"clean\". Prints the run as JSON; exits 0\n"+
			"when it succeeded or was skipped because another run holds the lease, 1 when it failed.")
	var (
		common  commonFlags
		metrics metricsTextfile
		timeout = fs.Duration("timeout", fs.envDuration("GC_TIMEOUT", 10*time.Minute), "give up after this long [GC_TIMEOUT]")
	)
	metrics.register(fs)
	common.register(fs, usesPool)
	common.registerPatience(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	if *timeout <= 0 {
		return &exitError{code: 2, err: errors.New("--timeout must be positive")}
	}
	logger, db, err := common.connect(ctx, e)
	if err != nil {
		return err
	}
	defer db.Close()

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	reg := prometheus.NewRegistry()
	svc, err := loadServices(ctx, db)
	if err != nil {
		return err
	}
	c, err := newCollector(db, svc, logger, reg, gc.Retention{})
	if err != nil {
		return err
	}
	r, err := c.Clean(ctx, gc.TriggerCLI)
	metrics.write(reg, logger)
	return reportRun(e, r, err)
}
