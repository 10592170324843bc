// Command limiter serves the Tollgate rate limiter over HTTP: the seed
// routes /ping, /status and /rate/* (docs/seeds.md), the generic /v1/check, health and metrics.
// Run it with --help for its flags. It exits 0 after a clean shutdown
// (SIGINT or SIGTERM), 2 on a bad configuration (one line on stderr) and 1
// on any other failure. SIGHUP reloads the policies and routes from the
// YAML file; a bad file is refused and the running policies stay.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/services/limiter/internal/app"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == config.PeerProgram { // the image's /bin/ratelimit
		args = append([]string{"--envoy-compat-env"}, args...)
	}
	code := exitCode(run(ctx, args, os.Getenv, os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// run loads the configuration and serves until ctx is done. Each SIGHUP
// reloads the policies and routes (see app.App.Reload).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(args, getenv)
	if errors.Is(err, config.ErrHelp) {
		return config.Usage(stdout)
	}
	if err != nil {
		return err
	}
	offset, err := app.ClockOffsetFromEnv(getenv) // test only
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := app.WithReload(func() (config.Config, error) { return config.Load(args, getenv) }, hup)
	return app.Run(ctx, cfg, app.WithLogger(app.NewLogger(cfg, stderr)), offset, reload)
}

// exitCode prints err as one line on stderr and returns the exit status:
// 0 for nil, 2 for a configuration error, 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "limiter: "+strings.Join(strings.Fields(err.Error()), " "))
	if errors.Is(err, config.ErrInvalid) {
		return 2
	}
	return 1
}
