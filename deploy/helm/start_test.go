package helm_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/tollgate/tollgate/deploy/internal/kubelet"
	"github.com/tollgate/tollgate/deploy/internal/proc"
	"github.com/tollgate/tollgate/pkg/limiter/redisstore/redistest"
)

// TestChartStartsLimiter renders the chart with each values set, on free
// ports, and runs bin/limiter as the rendered pod would: the container's
// arguments and environment as rendered (Secrets and the memory limit
// resolved as the kubelet does, the image's ENV underneath), every volume
// laid out as the kubelet lays it out (ConfigMaps and Secrets as
// ..TIMESTAMP folders behind a ..data link) at a folder standing for its
// mount path. The rendered readiness and liveness probes must answer 200 on
// the probed port, every declared container port must accept connections,
// and /metrics must answer where the ServiceMonitor scrapes.
func TestChartStartsLimiter(t *testing.T) {
	bin := proc.Bin(t)
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			var redisURL string
			if vals["store"] == "redis" {
				redisURL = redistest.Start(t).URL()
			}
			// A port picked free may be taken by another process before the
			// limiter binds it: then other ports, a few times.
			var (
				p       *proc.Process
				c       corev1.Container
				tlsConf *tls.Config
			)
			for attempt := 1; ; attempt++ {
				p, c, tlsConf = startPod(t, bin, vals, redisURL)
				ready := c.ReadinessProbe.HTTPGet
				err := p.Poll(probeURL(t, c, ready.Scheme, ready.Port.StrVal, ready.Path), http.StatusOK, tlsConf)
				if err == nil {
					break
				}
				if !p.BindFailed() || attempt == 3 {
					t.Fatal(err)
				}
				t.Logf("attempt %d: a port was taken meanwhile; again on other ports", attempt)
			}
			for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				require.NotNil(t, probe.HTTPGet)
				p.WaitStatus(t, probeURL(t, c, probe.HTTPGet.Scheme, probe.HTTPGet.Port.StrVal, probe.HTTPGet.Path), http.StatusOK, tlsConf)
			}
			for _, cp := range c.Ports {
				conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cp.ContainerPort))
				require.NoError(t, err, "container port %s (%d) does not accept connections", cp.Name, cp.ContainerPort)
				conn.Close()
			}
			scheme := corev1.URISchemeHTTP
			if tlsConf != nil {
				scheme = corev1.URISchemeHTTPS
			}
			p.WaitStatus(t, probeURL(t, c, scheme, "internal", "/metrics"), http.StatusOK, tlsConf)
			if rules, ok := vals["envoyRules"].(map[string]any); ok && len(rules) > 0 {
				checkEnvoyRules(t, probeURL(t, c, scheme, "internal", "/json"), tlsConf)
			}
		})
	}
}

// checkEnvoyRules asks POST /json about examples/envoy.yaml's /login
// descriptor: the limit in the answer is the ConfigMap's, read from the
// folder the chart mounts.
func checkEnvoyRules(t *testing.T, url string, tlsConf *tls.Config) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}`
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var answer struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			CurrentLimit struct {
				RequestsPerUnit int    `json:"requestsPerUnit"`
				Unit            string `json:"unit"`
			} `json:"currentLimit"`
		} `json:"statuses"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	assert.Equal(t, "OK", answer.OverallCode)
	require.Len(t, answer.Statuses, 1)
	assert.Equal(t, 5, answer.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, "MINUTE", answer.Statuses[0].CurrentLimit.Unit)
}

// startPod renders the chart with vals on free ports (redisURL, when not
// empty, is the Redis of the redis store, by URL or by Secret as vals say)
// and starts bin as the rendered pod's container. It returns the process,
// the container and, when the probes use HTTPS, the client configuration
// that trusts the pod's certificate.
func startPod(t *testing.T, bin string, vals map[string]any, redisURL string) (*proc.Process, corev1.Container, *tls.Config) {
	t.Helper()
	ports := map[string]any{"http": proc.FreePort(t), "grpc": proc.FreePort(t), "internal": proc.FreePort(t)}
	vals = merge(vals, map[string]any{"ports": ports})
	pod := kubelet.NewPod(t)
	if redisURL != "" {
		if r, ok := vals["redis"].(map[string]any); ok && r["existingSecret"] != nil {
			pod.Secrets[r["existingSecret"].(string)] = map[string]string{"redis-url": redisURL}
		} else {
			vals = merge(vals, map[string]any{"redis": map[string]any{"url": redisURL}})
		}
	}
	pod.Secrets["tollgate-admin"] = map[string]string{"admin-key": strings.Repeat("k", 40)}
	caPEM := tlsSecret(t, pod, "tollgate-tls")

	objs := renderObjects(t, vals)
	for _, cm := range find[*corev1.ConfigMap](objs) {
		pod.ConfigMaps[cm.Name] = cm.Data
	}
	tmpl, _ := podSpec(t, objs)
	c := tmpl.Spec.Containers[0]
	mounts := pod.Mount(t, tmpl.Spec, c, "data") // the StatefulSet's volumeClaimTemplate
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = mounts.Rewrite(t, a)
	}
	env := kubelet.ImageEnv(t, filepath.Join("..", "..", "Containerfile"), mounts)
	for _, e := range c.Env {
		env = append(env, e.Name+"="+mounts.Rewrite(t, pod.Resolve(t, e, c)))
	}
	p := proc.Start(t, bin, mounts.WorkDir, args, env)
	var tlsConf *tls.Config
	if c.ReadinessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(caPEM))
		tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return p, c, tlsConf
}

func probeURL(t *testing.T, c corev1.Container, scheme corev1.URIScheme, port, path string) string {
	t.Helper()
	for _, cp := range c.Ports {
		if cp.Name == port {
			return fmt.Sprintf("%s://127.0.0.1:%d%s", strings.ToLower(string(scheme)), cp.ContainerPort, path)
		}
	}
	t.Fatalf("the probe names port %q, which the container does not declare", port)
	return ""
}

// merge returns a copy of a with b's keys set over it, maps merged.
func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = merge(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// tlsSecret adds to p a kubernetes.io/tls Secret for 127.0.0.1 (tls.crt,
// tls.key, ca.crt) and returns the CA's PEM.
func tlsSecret(t *testing.T, p *kubelet.Pod, name string) []byte {
	t.Helper()
	cert, key, ca := proc.Certificate(t)
	p.Secrets[name] = map[string]string{"tls.crt": string(cert), "tls.key": string(key), "ca.crt": string(ca)}
	return ca
}
