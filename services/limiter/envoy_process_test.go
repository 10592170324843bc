package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestEnvoyAPIIsExactAcrossProcessesOnOneRedis starts two services on one
// Redis and sends 400 concurrent ShouldRateLimit calls, half to each, every
// call charging a fixed-window limit of 150 and a sliding-log limit of 100:
// exactly 150 and 100 of them are OK.
func TestEnvoyAPIIsExactAcrossProcessesOnOneRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary twice")
	}
	redis := redistest.Start(t)
	domain := redis.Prefix() // apart from any other run on a shared Redis
	dir := t.TempDir()
	rules := fmt.Sprintf(`domain: %s
descriptors:
  - key: tenant
    rate_limit: {unit: year, requests_per_unit: 150}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: sliding_log}
`, domain)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exact.yaml"), []byte(rules), 0o600))
	var clients []rlsv3.RateLimitServiceClient
	for range 2 {
		in := startProcess(t, append([]string{"--grpc-addr=127.0.0.1:0", "--store=redis",
			"--redis-url=" + redis.URL(), "--envoy-config=" + dir}, generous...))
		conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}

	const calls, workers = 400, 40
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}},
	}}
	var (
		mu       sync.Mutex
		okTenant int
		okUser   int
		failures []error
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	for w := range workers {
		client := clients[w%2]
		wg.Go(func() {
			for range calls / workers {
				resp, err := client.ShouldRateLimit(ctx, req)
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					okTenant += okCount(resp.GetStatuses()[0])
					okUser += okCount(resp.GetStatuses()[1])
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)
	assert.Equal(t, 150, okTenant, "fixed_window across two processes")
	assert.Equal(t, 100, okUser, "sliding_log across two processes")
}

func okCount(s *rlsv3.RateLimitResponse_DescriptorStatus) int {
	if s.GetCode() == rlsv3.RateLimitResponse_OK {
		return 1
	}
	return 0
}

// TestMalformedEnvoyConfigIsOneLineAndExitCode2 checks the start-up error
// a user sees for a bad file: one line naming the file and the field.
func TestMalformedEnvoyConfigIsOneLineAndExitCode2(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"), 0o600))
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--store=memory", "--envoy-config", dir}, noEnv, &out, &errOut)
	var printed bytes.Buffer
	assert.Equal(t, 2, exitCode(err, &printed))
	assert.Equal(t, "limiter: envoy: "+file+`: descriptors[0].rate_limit.unit: "fortnight" is not one of second, minute, hour, day, week, month, year (line 5)`+"\n", printed.String())
}
