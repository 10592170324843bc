package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
)

// Point 6: the --envoy-config folder is watched. A file written, changed
// and removed while requests run applies without a signal; a broken file
// keeps the running rules, and the reload failure is counted.
func TestEnvoyFolderIsWatched(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	rule := func(domain string, perMinute int) string {
		return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", domain, perMinute)
	}
	write("a.yaml", rule("alpha", 5))
	cfg := load(t, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--envoy-config", dir, "--log-format=json")
	l, _, stop := runLogged(t, cfg, WithReload(func() (config.Config, error) { return cfg, nil }, nil))
	t.Cleanup(func() { assert.NoError(t, stop()) })
	conn, err := grpc.NewClient(l.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)

	// limitOf asks domain over gRPC, then on POST /json (fresh values, so
	// no counter fills up) and returns the limit both report, 0 for none;
	// an error when a call fails or, when they disagree (a reload between
	// the two), when same is set.
	var n atomic.Int64
	limitOf := func(domain string, same bool) (uint32, error) {
		r := req(domain, []string{"k", fmt.Sprint("v", n.Add(1))})
		viaGRPC, err := client.ShouldRateLimit(context.Background(), r)
		if err != nil {
			return 0, err
		}
		body, err := protojson.Marshal(req(domain, []string{"k", fmt.Sprint("v", n.Add(1))}))
		if err != nil {
			return 0, err
		}
		resp, err := http.Post("http://"+l.Addr+"/json", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return 0, err
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return 0, err
		}
		var viaJSON rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(data, &viaJSON); err != nil {
			return 0, fmt.Errorf("/json %d: %s", resp.StatusCode, data)
		}
		g, j := viaGRPC.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), viaJSON.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
		if g != j && same {
			return 0, fmt.Errorf("gRPC says %d, /json %d", g, j)
		}
		return g, nil
	}

	// Requests run all along; none may fail.
	var failures atomic.Int64
	var firstFailure atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 1_000_000; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := limitOf("alpha", false); err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}
	})
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		assert.Zero(t, failures.Load(), "requests during the changes: first failure %v", firstFailure.Load())
	})

	// until polls until domain reports want, then logs how long it took.
	until := func(step, domain string, want uint32) {
		t.Helper()
		start := time.Now()
		var got uint32
		require.Eventually(t, func() bool {
			var err error
			got, err = limitOf(domain, true)
			return err == nil && got == want
		}, 20*time.Second, 20*time.Millisecond, "%s: %s still reports %d", step, domain, got)
		t.Logf("%s: applied after %v", step, time.Since(start).Round(time.Millisecond))
	}
	got, err := limitOf("alpha", true)
	require.NoError(t, err)
	require.Equal(t, uint32(5), got)

	write("b.yaml", rule("beta", 1))
	until("file written", "beta", 1)
	write("a.yaml", rule("alpha", 7))
	until("file changed", "alpha", 7)

	failed := reloadsCounted(t, l.Addr, "failure")
	write("c.yaml", "domain: [")
	require.Eventually(t, func() bool { return reloadsCounted(t, l.Addr, "failure") > failed }, 20*time.Second, 20*time.Millisecond,
		"the broken file is read and refused")
	for domain, want := range map[string]uint32{"alpha": 7, "beta": 1} {
		got, err := limitOf(domain, true)
		require.NoError(t, err)
		assert.Equal(t, want, got, "a broken file keeps the running rules: %s", domain)
	}

	require.NoError(t, os.Remove(filepath.Join(dir, "c.yaml")))
	require.NoError(t, os.Remove(filepath.Join(dir, "b.yaml")))
	until("files removed", "beta", 0)
	got, err = limitOf("alpha", true)
	require.NoError(t, err)
	assert.Equal(t, uint32(7), got)
}

// reloadsCounted reads tollgate_config_reloads_total{result} from /metrics.
func reloadsCounted(t *testing.T, addr, result string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var n int
	prefix := `tollgate_config_reloads_total{result="` + result + `"} `
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
		}
	}
	return n
}
