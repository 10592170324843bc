package helm_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

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
	pod := newPod(t)
	if redisURL != "" {
		if r, ok := vals["redis"].(map[string]any); ok && r["existingSecret"] != nil {
			pod.secrets[r["existingSecret"].(string)] = map[string]string{"redis-url": redisURL}
		} else {
			vals = merge(vals, map[string]any{"redis": map[string]any{"url": redisURL}})
		}
	}
	pod.secrets["tollgate-admin"] = map[string]string{"admin-key": strings.Repeat("k", 40)}
	caPEM := pod.tlsSecret(t, "tollgate-tls")

	objs := renderObjects(t, vals)
	for _, cm := range find[*corev1.ConfigMap](objs) {
		pod.configMaps[cm.Name] = cm.Data
	}
	tmpl, _ := podSpec(t, objs)
	c := tmpl.Spec.Containers[0]
	mounts := pod.mount(t, tmpl.Spec, c)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = mounts.rewrite(t, a)
	}
	env := imageEnv(t, mounts)
	for _, e := range c.Env {
		env = append(env, e.Name+"="+mounts.rewrite(t, pod.resolve(t, e, c)))
	}
	p := proc.Start(t, bin, mounts.workDir, args, env)
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

// pod holds what the kubelet would find in the cluster for the pod: the
// ConfigMaps and Secrets it mounts or reads.
type pod struct {
	root       string
	configMaps map[string]map[string]string
	secrets    map[string]map[string]string
}

func newPod(t *testing.T) *pod {
	return &pod{root: t.TempDir(), configMaps: map[string]map[string]string{}, secrets: map[string]map[string]string{}}
}

// tlsSecret adds a kubernetes.io/tls Secret for 127.0.0.1 (tls.crt,
// tls.key, ca.crt) and returns the CA's PEM.
func (p *pod) tlsSecret(t *testing.T, name string) []byte {
	t.Helper()
	cert, key, ca := proc.Certificate(t)
	p.secrets[name] = map[string]string{"tls.crt": string(cert), "tls.key": string(key), "ca.crt": string(ca)}
	return ca
}

// resolve returns an env var's value as the kubelet would set it.
func (p *pod) resolve(t *testing.T, e corev1.EnvVar, c corev1.Container) string {
	t.Helper()
	switch {
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		v, ok := p.secrets[ref.Name][ref.Key]
		require.True(t, ok, "env %s reads Secret %s key %s, which the test does not provide", e.Name, ref.Name, ref.Key)
		return v
	case e.ValueFrom.ResourceFieldRef != nil:
		ref := e.ValueFrom.ResourceFieldRef
		require.Equal(t, "limits.memory", ref.Resource, "env %s", e.Name)
		q := c.Resources.Limits[corev1.ResourceMemory]
		divisor := ref.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return fmt.Sprint(q.Value() / divisor.Value())
	}
	t.Fatalf("env %s: a valueFrom the test does not resolve", e.Name)
	return ""
}

// mounts maps the container's paths onto the test's folders.
type mounts struct {
	paths   map[string]string // container path -> host path
	workDir string
}

// rewrite replaces a container path in s (an argument or an env value) by
// its host path, the longest mount first; an absolute path under no mount
// fails the test, since the container would not find it.
func (m mounts) rewrite(t *testing.T, s string) string {
	t.Helper()
	name, val, isFlag := strings.Cut(s, "=")
	if !isFlag {
		val, name = s, ""
	}
	if !strings.HasPrefix(val, "/") {
		return s
	}
	keys := make([]string, 0, len(m.paths))
	for k := range m.paths {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		if val == k || strings.HasPrefix(val, k+"/") {
			val = m.paths[k] + strings.TrimPrefix(val, k)
			if isFlag {
				return name + "=" + val
			}
			return val
		}
	}
	t.Fatalf("%q names a path under no volume mount", s)
	return ""
}

// mount lays out every volume of spec the kubelet's way and maps c's mount
// paths onto them; the image's /data (its WORKDIR) is a folder of its own
// when no volume is mounted there.
func (p *pod) mount(t *testing.T, spec corev1.PodSpec, c corev1.Container) mounts {
	t.Helper()
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		dir := filepath.Join(p.root, "volumes", v.Name)
		switch {
		case v.ConfigMap != nil:
			data, ok := p.configMaps[v.ConfigMap.Name]
			require.True(t, ok, "volume %s mounts ConfigMap %s, which the chart does not render", v.Name, v.ConfigMap.Name)
			atomicWriterLayout(t, dir, data)
		case v.Secret != nil:
			data, ok := p.secrets[v.Secret.SecretName]
			require.True(t, ok, "volume %s mounts Secret %s, which the test does not provide", v.Name, v.Secret.SecretName)
			atomicWriterLayout(t, dir, data)
		case v.EmptyDir != nil:
			require.NoError(t, os.MkdirAll(dir, 0o755))
		default:
			t.Fatalf("volume %s: a kind the test does not lay out", v.Name)
		}
		vols[v.Name] = dir
	}
	m := mounts{paths: map[string]string{}}
	for _, vm := range c.VolumeMounts {
		dir, ok := vols[vm.Name]
		if !ok && vm.Name == "data" { // the StatefulSet's volumeClaimTemplate
			dir = filepath.Join(p.root, "volumes", "data")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			ok = true
		}
		require.True(t, ok, "mount %s names no volume", vm.Name)
		m.paths[vm.MountPath] = filepath.Join(dir, vm.SubPath)
	}
	if _, ok := m.paths["/data"]; !ok {
		dir := filepath.Join(p.root, "image-data")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		m.paths["/data"] = dir
	}
	m.workDir = m.paths["/data"]
	return m
}

// atomicWriterLayout writes data as the kubelet writes a ConfigMap or
// Secret volume: the files in a ..TIMESTAMP folder, ..data a link to it,
// and each key a link through ..data.
func atomicWriterLayout(t *testing.T, dir string, data map[string]string) {
	t.Helper()
	ts := "..2026_12_06_12_00_00.000000001"
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ts), 0o755))
	for k, v := range data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, ts, k), []byte(v), 0o644))
		require.NoError(t, os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)))
	}
	require.NoError(t, os.Symlink(ts, filepath.Join(dir, "..data")))
}

// imageEnv returns the Containerfile's ENV, which the container starts
// with under the pod's env, its paths mapped.
func imageEnv(t *testing.T, m mounts) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "Containerfile"))
	require.NoError(t, err)
	defer f.Close()
	env, err := containerfileEnv(f)
	require.NoError(t, err)
	require.NotEmpty(t, env, "the Containerfile sets no ENV")
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		env[i] = k + "=" + m.rewrite(t, v)
	}
	return env
}

// containerfileEnv reads the KEY=VALUE pairs of a Containerfile's ENV
// instructions (continued lines included).
func containerfileEnv(r io.Reader) ([]string, error) {
	var env []string
	sc := bufio.NewScanner(r)
	in := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			line, in = rest, true
		} else if !in {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		for f := range strings.FieldsSeq(strings.TrimSuffix(line, "\\")) {
			if !strings.Contains(f, "=") {
				return nil, fmt.Errorf("ENV %q: only the KEY=VALUE form is read", line)
			}
			env = append(env, f)
		}
		in = cont
	}
	return env, sc.Err()
}

func TestContainerfileEnv(t *testing.T) {
	env, err := containerfileEnv(strings.NewReader("FROM scratch\nENV A=1 \\\n    B=/x\nUSER 1\nENV C=3\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"A=1", "B=/x", "C=3"}, env)
	_, err = containerfileEnv(strings.NewReader("ENV A 1\n"))
	assert.Error(t, err)
}
