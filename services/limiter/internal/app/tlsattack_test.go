package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

// clientHello returns the first flight of a TLS client: its ClientHello
// record, as a stalled attacker sends it.
func clientHello(t *testing.T) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: "tollgate", NextProtos: []string{"h2"}}).Handshake()
		_ = client.Close()
	}()
	require.NoError(t, server.SetDeadline(time.Now().Add(30*time.Second))) // a hang guard
	header := make([]byte, 5)
	_, err := io.ReadFull(server, header)
	require.NoError(t, err)
	body := make([]byte, int(header[3])<<8|int(header[4]))
	_, err = io.ReadFull(server, body)
	require.NoError(t, err)
	return append(header, body...)
}

// stallHandshakes opens n connections to addr from the loopback address
// from, none of which finishes its TLS handshake: a third send nothing, a
// third half of hello, a third all of it and then nothing. They are
// closed when the test ends.
func stallHandshakes(t *testing.T, addr, from string, n int, hello []byte) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		switch i % 3 {
		case 1:
			_, _ = c.Write(hello[:len(hello)/2]) // refused connections fail here: fine
		case 2:
			_, _ = c.Write(hello)
		}
		conns = append(conns, c)
	}
	return conns
}

// fromAddr is a dialer from the loopback address ip.
func fromAddr(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
}

// grpcFrom is a client of addr whose connections come from the loopback
// address from; it is closed when the test ends.
func grpcFrom(t *testing.T, addr, from string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return fromAddr(from).DialContext(ctx, "tcp", addr)
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestStalledHandshakesAreBoundedAndGoodClientsServed: four addresses open
// 60 connections each to the HTTP and the gRPC listener (bounded to 48
// connections, 12 per client), none finishing its handshake, and hold them
// (the handshake deadline, --read-header-timeout, is a minute here): a
// fifth address still gets /healthz and a gRPC decision, the open
// connections stay within the bound, and the server's goroutines grow with
// the bound, not with the flood. Over TLS the stalled connections send
// nothing, half a ClientHello or a whole one; in plain TCP nothing, half
// the HTTP/2 preface, or all of it but its last byte (a whole handshake
// makes an open connection: TestOpenGRPCConnectionsWithoutCallsAreReclaimed).
func TestStalledHandshakesAreBoundedAndGoodClientsServed(t *testing.T) {
	const maxConns, each = 48, 60
	for _, overTLS := range []bool{true, false} {
		t.Run(map[bool]string{true: "tls", false: "plain"}[overTLS], func(t *testing.T) {
			args := []string{"--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--log-format=json", "--envoy-config", envoyRules,
				"--max-conns=48", "--max-conns-per-client=12", "--read-header-timeout=1m", "--read-timeout=1m", "--write-timeout=1m"}
			ca := tlstest.NewCA(t, "ca")
			scheme, httpTLS, grpcCreds, hello := "http", (*tls.Config)(nil), insecure.NewCredentials(), []byte(http2.ClientPreface[:len(http2.ClientPreface)-1])
			if overTLS {
				files := tlstest.Files(t, ca.Server(t, "server"), nil)
				args = append(args, "--tls-cert", files.Cert, "--tls-key", files.Key)
				scheme, httpTLS, grpcCreds, hello = "https", clientTLS(ca, nil), credentials.NewTLS(clientTLS(ca, nil)), clientHello(t)
			}
			l, _, stop := runLogged(t, load(t, args...))
			t.Cleanup(func() { assert.NoError(t, stop()) })
			before := runtime.NumGoroutine()

			for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
				stallHandshakes(t, l.Addr, from, each, hello)
				stallHandshakes(t, l.GRPCAddr, from, each, hello)
			}
			good := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				DialContext: fromAddr("127.0.0.9").DialContext, TLSClientConfig: httpTLS, DisableKeepAlives: true}}
			resp, err := good.Get(scheme + "://" + l.Addr + "/healthz")
			if assert.NoError(t, err, "/healthz from a fifth address during the flood") {
				_ = resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
			defer cancel()
			answer, err := rlsv3.NewRateLimitServiceClient(grpcFrom(t, l.GRPCAddr, "127.0.0.9", grpcCreds)).ShouldRateLimit(ctx, request("flood"))
			if assert.NoError(t, err, "a gRPC decision from a fifth address during the flood") {
				assert.Equal(t, rlsv3.RateLimitResponse_OK, answer.GetOverallCode())
			}
			// The connections reclaimed from the flood are closed, but their
			// goroutines end in their own time; the stalled ones admitted
			// hold theirs for the minute of the handshake deadline.
			grown := func() int { return runtime.NumGoroutine() - before }
			assert.Eventually(t, func() bool { return grown() < 2*maxConns+32 }, 30*time.Second, 10*time.Millisecond,
				"goroutines grow with the bound, not the flood")
			t.Logf("goroutines: %d before the flood, %d more after it (%d connections per listener, bound %d)", before, grown(), 4*each, maxConns)

			resp, err = good.Get(scheme + "://" + l.Addr + "/metrics")
			require.NoError(t, err)
			samples := samplesOf(t, resp.Body)
			_ = resp.Body.Close()
			for _, listener := range []string{"addr", "grpc_addr"} {
				assert.LessOrEqual(t, samples[`tollgate_connections_open{listener="`+listener+`"}`], float64(maxConns), listener)
				turnedAway := samples[`tollgate_connections_refused_total{listener="`+listener+`"}`] + samples[`tollgate_connections_reclaimed_total{listener="`+listener+`"}`]
				assert.Positive(t, turnedAway, listener+": connections turned away or reclaimed")
			}
		})
	}
}

// openHTTP2 opens a connection to addr from the loopback address from,
// over TLS when tlsConfig is not nil, and finishes its HTTP/2 handshake,
// the client preface and SETTINGS, waiting for the server's
// acknowledgement: an open gRPC connection with no call, as a client
// between calls holds one. It is closed when the test ends.
func openHTTP2(t *testing.T, addr, from string, tlsConfig *tls.Config) *http2.Framer {
	t.Helper()
	c, err := fromAddr(from).Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second))) // a hang guard
	if tlsConfig != nil {
		tc := tls.Client(c, tlsConfig)
		require.NoError(t, tc.Handshake())
		c = tc
	}
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	require.NoError(t, fr.WriteSettings())
	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err, "the server's acknowledgement of SETTINGS")
		if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
			return fr
		}
	}
}

// beginCall sends the headers of a call to method on stream 1 of fr and
// never its message: the call stays in flight until the stream is reset
// or the server's deadline for it (--read-timeout) passes.
func beginCall(t *testing.T, fr *http2.Framer, scheme, method string) {
	t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", scheme}, {":path", method}, {":authority", "tollgate"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}))
}

// TestOpenGRPCConnectionsWithoutCallsAreReclaimed: four addresses fill the
// gRPC listener's 48 slots (12 each) with connections whose HTTP/2
// handshake is done but which make no call, and hold them (the idle
// timeout is a minute here): a fifth address still gets a decision, one of
// them being reclaimed for it, as an HTTP keep-alive between requests is.
func TestOpenGRPCConnectionsWithoutCallsAreReclaimed(t *testing.T) {
	l, _, stop := runLogged(t, load(t, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--log-format=json",
		"--envoy-config", envoyRules, "--max-conns=48", "--max-conns-per-client=12", "--idle-timeout=1m"))
	t.Cleanup(func() { assert.NoError(t, stop()) })
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		for range 12 {
			openHTTP2(t, l.GRPCAddr, from, nil)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	answer, err := rlsv3.NewRateLimitServiceClient(grpcFrom(t, l.GRPCAddr, "127.0.0.9", insecure.NewCredentials())).ShouldRateLimit(ctx, request("held"))
	if assert.NoError(t, err, "a gRPC decision from a fifth address, the slots held by connections with no call") {
		assert.Equal(t, rlsv3.RateLimitResponse_OK, answer.GetOverallCode())
	}

	resp, err := http.Get("http://" + l.Addr + "/metrics")
	require.NoError(t, err)
	samples := samplesOf(t, resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, float64(48), samples[`tollgate_connections_open{listener="grpc_addr"}`])
	assert.Equal(t, float64(1), samples[`tollgate_connections_reclaimed_total{listener="grpc_addr"}`])
	assert.Zero(t, samples[`tollgate_connections_refused_total{listener="grpc_addr"}`])
}

// TestACallInFlightKeepsItsConnection: with one slot on the gRPC listener,
// held by a connection carrying a call whose message has not arrived, a
// newcomer from another address is refused, over TLS and in plain TCP.
// Once the call is reset, the connection is idle and a call from the
// newcomer's address reclaims it. A health Watch, meant to stay open, does
// not hold its connection: a third address reclaims it.
func TestACallInFlightKeepsItsConnection(t *testing.T) {
	for _, overTLS := range []bool{true, false} {
		t.Run(map[bool]string{true: "tls", false: "plain"}[overTLS], func(t *testing.T) {
			args := []string{"--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--log-format=json", "--envoy-config", envoyRules,
				"--max-conns=1", "--max-conns-per-client=1", "--read-timeout=1m"}
			scheme, httpTLS, h2TLS, creds := "http", (*tls.Config)(nil), (*tls.Config)(nil), insecure.NewCredentials()
			if overTLS {
				ca := tlstest.NewCA(t, "ca")
				files := tlstest.Files(t, ca.Server(t, "server"), nil)
				args = append(args, "--tls-cert", files.Cert, "--tls-key", files.Key)
				scheme, httpTLS, h2TLS, creds = "https", clientTLS(ca, nil), clientTLS(ca, nil), credentials.NewTLS(clientTLS(ca, nil))
				h2TLS.ServerName, h2TLS.NextProtos = "localhost", []string{"h2"}
			}
			l, _, stop := runLogged(t, load(t, args...))
			t.Cleanup(func() { assert.NoError(t, stop()) })
			// One keep-alive connection for every scrape: the HTTP listener
			// has one slot too.
			scraper := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: httpTLS}}
			t.Cleanup(scraper.CloseIdleConnections)
			grpcSample := func(name string) float64 {
				t.Helper()
				resp, err := scraper.Get(scheme + "://" + l.Addr + "/metrics")
				require.NoError(t, err)
				defer resp.Body.Close()
				samples := samplesOf(t, resp.Body)
				_, _ = io.Copy(io.Discard, resp.Body) // the connection is reused once read to the end
				return samples[name+`{listener="grpc_addr"}`]
			}
			// A bare connection from an address: it is open until the test
			// ends, or closed at once when refused.
			dial := func(from string) net.Conn {
				c, err := fromAddr(from).Dial("tcp", l.GRPCAddr)
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}

			fr := openHTTP2(t, l.GRPCAddr, "127.0.0.2", h2TLS)
			beginCall(t, fr, scheme, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
			// The server took the call once its headers were read: wait for
			// the connection to be busy.
			require.Eventually(t, func() bool { return grpcSample("tollgate_connections_idle") == 0 }, 20*time.Second, 10*time.Millisecond,
				"the call's connection is busy")
			// Refused, it is closed as soon as accepted; admitted, it would get
			// the server's SETTINGS (plain) or wait for a ClientHello (TLS).
			c := dial("127.0.0.3")
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second))) // a hang guard
			n, err := c.Read(make([]byte, 1))
			assert.True(t, n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded),
				"the only slot carries a call: the newcomer is refused (read %d bytes, %v)", n, err)
			assert.Equal(t, float64(1), grpcSample("tollgate_connections_refused_total"))

			require.NoError(t, fr.WriteRSTStream(1, http2.ErrCodeCancel))
			// The server sees the call end in its own time.
			require.Eventually(t, func() bool { return grpcSample("tollgate_connections_idle") == 1 }, 20*time.Second, 10*time.Millisecond,
				"the call reset, its connection is idle")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
			defer cancel()
			watch, err := healthpb.NewHealthClient(grpcFrom(t, l.GRPCAddr, "127.0.0.3", creds)).Watch(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err, "a Watch from the newcomer's address, the slot's connection idle")
			_, err = watch.Recv()
			require.NoError(t, err)
			assert.Equal(t, float64(1), grpcSample("tollgate_connections_reclaimed_total"))

			dial("127.0.0.4")
			// The listener takes it in its own time.
			assert.Eventually(t, func() bool { return grpcSample("tollgate_connections_reclaimed_total") == 2 }, 20*time.Second, 10*time.Millisecond,
				"a Watch does not hold its connection: a third address reclaims it")
			assert.Equal(t, float64(1), grpcSample("tollgate_connections_refused_total"))
		})
	}
}

// TestStalledHandshakesAreClosedByTheDeadline: connections that never
// finish their TLS handshake are closed by the server once the handshake
// deadline (--read-header-timeout, 1 s here) passes, on the HTTPS and the
// gRPC listener.
func TestStalledHandshakesAreClosedByTheDeadline(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	files := tlstest.Files(t, ca.Server(t, "server"), nil)
	l, _, stop := runLogged(t, load(t, "--addr=127.0.0.1:0", "--grpc-addr=127.0.0.1:0", "--store=memory", "--log-format=json",
		"--envoy-config", envoyRules, "--tls-cert", files.Cert, "--tls-key", files.Key, "--read-header-timeout=1s"))
	t.Cleanup(func() { assert.NoError(t, stop()) })
	hello := clientHello(t)
	for _, addr := range []string{l.Addr, l.GRPCAddr} {
		for i, c := range stallHandshakes(t, addr, "127.0.0.2", 6, hello) {
			// Whatever the server sent (its first flight), then the close;
			// the bound is a hang guard, far above the deadline.
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err := io.Copy(io.Discard, c)
			assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: stalled connection %d still open after 30 s", addr, i)
		}
	}
}

// TestDecisionsWithoutTheCertificateAnotherListenerAsksForAreWarned: with
// a client certificate asked for on one listener that decides (the
// internal one's decision APIs, or Envoy's gRPC), the same decisions
// still answer without a certificate on the other (gRPC, or POST /json):
// a client reaching it charges the budgets the certificate guards. The
// start says so in one WARN naming both; with mutual TLS everywhere, none.
func TestDecisionsWithoutTheCertificateAnotherListenerAsksForAreWarned(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "clients")
	files := tlstest.Files(t, ca.Server(t, "server"), clients)
	const warning = "decisions are served without a client certificate"

	l := serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key, "--internal-tls-client-ca", files.ClientCA)
	code, _, err := shouldRateLimit(grpcConn(t, l.grpc, ca, nil))
	require.NoError(t, err, "gRPC without a client certificate")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, 1, l.logs.Count(`"level":"WARN"`, warning, `"mtls":["internal_addr"]`, `"plain":["grpc_addr"]`), l.logs.String())

	l = serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key, "--grpc-tls-client-ca", files.ClientCA)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(ca, nil)}}
	resp, err := c.Post("https://"+l.internal+"/json", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"customer","value":"x"}]}]}`))
	require.NoError(t, err, "POST /json without a client certificate")
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, l.logs.Count(`"level":"WARN"`, warning, `"mtls":["grpc_addr"]`, `"plain":["internal_addr"]`), l.logs.String())

	l = serveListeners(t, "--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-client-ca", files.ClientCA)
	assert.Zero(t, l.logs.Count(warning), l.logs.String())
}
