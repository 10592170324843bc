// Package peerpod runs a pod written for envoyproxy/ratelimit (Envoy
// Gateway's rate-limit Deployment, the Istio example) with Tollgate in the
// peer's place, as the kubelet would: the container's command and args, its
// env resolved (Secrets, the cluster's Services), its volumes laid out by
// package kubelet, on free ports. It runs $LIMITER_BIN under the command's
// name, or the image $LIMITER_IMAGE with podman.
package peerpod

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/tollgate/tollgate/deploy/internal/kubelet"
	"github.com/tollgate/tollgate/deploy/internal/proc"
)

// ImageEnv names the variable that runs the pod's container from an image
// with podman instead of $LIMITER_BIN: scripts/image-test.sh sets it.
const ImageEnv = "LIMITER_IMAGE"

// Cluster is what the pod finds around it.
type Cluster struct {
	// Services maps the host:port of each Service the pod names to the
	// test's server, as the cluster's DNS would resolve it.
	Services map[string]string
	// SystemCA, when set, is a PEM file the container trusts as its
	// system's CAs, as an image built with the operator's own CA does: the
	// binary's SSL_CERT_FILE, the image's /etc/ssl/certs/ca-certificates.crt.
	SystemCA string
}

func (c Cluster) resolve(v string) string {
	for from, to := range c.Services {
		v = strings.ReplaceAll(v, from, to)
	}
	return v
}

// imageCAs is where the image keeps the system's CA certificates.
const imageCAs = "/etc/ssl/certs/ca-certificates.crt"

// Pod is a started pod: its process and where each port the pod spec
// names (probes, container ports, scrape annotation) listens now.
type Pod struct {
	*proc.Process
	Ports map[int32]int
}

// URL is http://127.0.0.1:PORT+path for the pod spec's port.
func (p *Pod) URL(t testing.TB, port int32, path string) string {
	t.Helper()
	moved, ok := p.Ports[port]
	require.True(t, ok, "port %d is none of the pod's", port)
	return fmt.Sprintf("http://127.0.0.1:%d%s", moved, path)
}

// Start starts tmpl's container (Launch) and waits until its readiness
// probe answers 200, starting again on other ports when one was taken
// before the process bound it.
func Start(t testing.TB, tmpl corev1.PodTemplateSpec, pod *kubelet.Pod, m kubelet.Mounts, cl Cluster) *Pod {
	t.Helper()
	ready := tmpl.Spec.Containers[0].ReadinessProbe
	require.True(t, ready != nil && ready.HTTPGet != nil, "the container has no HTTP readiness probe")
	for attempt := 1; ; attempt++ {
		p := Launch(t, tmpl, pod, m, cl)
		err := p.Poll(p.URL(t, ready.HTTPGet.Port.IntVal, ready.HTTPGet.Path), http.StatusOK, nil)
		if err == nil {
			return p
		}
		if !p.BindFailed() || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: a port was taken meanwhile; again on other ports", attempt)
	}
}

// Launch starts tmpl's only container on free ports (see movePorts)
// without waiting for it.
func Launch(t testing.TB, tmpl corev1.PodTemplateSpec, pod *kubelet.Pod, m kubelet.Mounts, cl Cluster) *Pod {
	t.Helper()
	require.Len(t, tmpl.Spec.Containers, 1)
	moved, ports := movePorts(t, tmpl)
	if image := os.Getenv(ImageEnv); image != "" {
		return &Pod{Process: runImage(t, image, tmpl.Spec, pod, m, cl, ports), Ports: moved}
	}
	c := tmpl.Spec.Containers[0]
	require.NotEmpty(t, c.Command, "the container runs the image's entrypoint, not the peer's command")
	// The command (/bin/ratelimit) is the binary under that name.
	binDir := filepath.Join(pod.Root, "command")
	require.NoError(t, os.MkdirAll(binDir, 0o755))
	cmd := filepath.Join(binDir, filepath.Base(c.Command[0]))
	if _, err := os.Lstat(cmd); os.IsNotExist(err) {
		require.NoError(t, os.Symlink(proc.Bin(t), cmd))
	}
	m.Paths[filepath.Dir(c.Command[0])] = binDir
	env := kubelet.ImageEnv(t, filepath.Join(moduleRoot(t), "..", "Containerfile"), m)
	env = append(env, podEnv(t, c, pod, cl, ports, func(v string) string { return m.Rewrite(t, v) })...)
	if cl.SystemCA != "" {
		env = append(env, "SSL_CERT_FILE="+cl.SystemCA)
	}
	args := make([]string, 0, len(c.Command)-1+len(c.Args))
	for _, a := range append(c.Command[1:], c.Args...) {
		args = append(args, m.Rewrite(t, a))
	}
	return &Pod{Process: proc.Start(t, m.Rewrite(t, c.Command[0]), m.WorkDir, args, env), Ports: moved}
}

// moduleRoot is the deploy module's folder, found from the test's working
// directory (its package's folder).
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// movePorts picks a free port for each port the peer listens on, set by
// its variables with its defaults (envoyproxy/ratelimit f2fb157,
// src/settings/settings.go: PORT 8080, GRPC_PORT 8081, PROMETHEUS_ADDR
// with USE_PROMETHEUS): a pod has its own network, the test's processes
// share the machine's. It returns the pod's port -> the free one, and the
// variables to set; every port the pod probes, declares or scrapes must be
// one of them.
func movePorts(t testing.TB, tmpl corev1.PodTemplateSpec) (map[int32]int, map[string]string) {
	t.Helper()
	c := tmpl.Spec.Containers[0]
	get := func(name, def string) string {
		for _, e := range c.Env {
			if e.Name == name && e.Value != "" {
				return e.Value
			}
		}
		return def
	}
	moved, env := map[int32]int{}, map[string]string{}
	move := func(name, value string) {
		host, port, found := cutPort(value)
		n, err := strconv.Atoi(port)
		require.NoError(t, err, "%s=%s", name, value)
		free := proc.FreePort(t)
		moved[int32(n)] = free
		if found {
			env[name] = host + ":" + strconv.Itoa(free)
		} else {
			env[name] = strconv.Itoa(free)
		}
	}
	move("PORT", get("PORT", "8080"))
	move("GRPC_PORT", get("GRPC_PORT", "8081"))
	if get("USE_PROMETHEUS", "false") == "true" {
		move("PROMETHEUS_ADDR", get("PROMETHEUS_ADDR", ":9090"))
	}
	used := map[string]int32{}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			used["probe "+p.HTTPGet.Path] = p.HTTPGet.Port.IntVal
		}
	}
	for _, cp := range c.Ports {
		used["container port "+cp.Name] = cp.ContainerPort
	}
	if a := tmpl.Annotations["prometheus.io/port"]; a != "" {
		n, err := strconv.Atoi(a)
		require.NoError(t, err)
		used["scrape annotation"] = int32(n)
	}
	for what, port := range used {
		require.Contains(t, moved, port, "%s uses port %d, on which the peer's PORT, GRPC_PORT and PROMETHEUS_ADDR open nothing", what, port)
	}
	return moved, env
}

// cutPort splits "host:port" (host may be empty) or a bare port.
func cutPort(v string) (host, port string, found bool) {
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return "", v, false
	}
	return v[:i], v[i+1:], true
}

// podEnv is c's env as the kubelet sets it, the Services resolved, ports
// set over it; paths maps each value (the binary sees host paths, the
// image its own).
func podEnv(t testing.TB, c corev1.Container, pod *kubelet.Pod, cl Cluster, ports map[string]string, paths func(string) string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		if _, ok := ports[e.Name]; !ok {
			env = append(env, e.Name+"="+paths(cl.resolve(pod.Resolve(t, e, c))))
		}
	}
	for k, v := range ports {
		env = append(env, k+"="+v)
	}
	return env
}

// runImage runs image with podman as the kubelet runs spec's container:
// the command as entrypoint, the env, each volume mount (-v), the security
// context; on the host's network (ports moved as for the binary), with the
// runtime and ulimits of scripts/image-test.sh (PODMAN_FLAGS,
// PODMAN_RUN_FLAGS).
func runImage(t testing.TB, image string, spec corev1.PodSpec, pod *kubelet.Pod, m kubelet.Mounts, cl Cluster, ports map[string]string) *proc.Process {
	t.Helper()
	c := spec.Containers[0]
	flags := func(name, def string) []string {
		if v, ok := os.LookupEnv(name); ok {
			return strings.Fields(v)
		}
		return strings.Fields(def)
	}
	global := flags("PODMAN_FLAGS", "--runtime runc")
	name := fmt.Sprintf("tollgate-peerpod-%d-%d", os.Getpid(), time.Now().UnixNano())
	args := append(append([]string{}, global...), "run", "--rm", "--name", name)
	if len(c.Command) > 0 {
		entrypoint, err := json.Marshal(c.Command)
		require.NoError(t, err)
		args = append(args, "--entrypoint", string(entrypoint))
	}
	args = append(args, flags("PODMAN_RUN_FLAGS", "--network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096")...)
	for _, e := range podEnv(t, c, pod, cl, ports, func(v string) string { return v }) {
		args = append(args, "-e", e)
	}
	for _, vm := range c.VolumeMounts {
		v := m.Paths[vm.MountPath] + ":" + vm.MountPath
		if vm.ReadOnly {
			v += ":ro"
		}
		args = append(args, "-v", v)
	}
	if cl.SystemCA != "" {
		args = append(args, "-v", cl.SystemCA+":"+imageCAs+":ro")
	}
	args = append(args, securityFlags(spec.SecurityContext, c.SecurityContext)...)
	args = append(append(args, image), c.Args...)
	t.Cleanup(func() { _ = exec.Command("podman", append(global, "rm", "-f", "-i", name)...).Run() })
	return proc.Start(t, "podman", pod.Root, args, os.Environ())
}

// securityFlags are podman's flags for a container's security context
// over its pod's, as the kubelet applies them.
func securityFlags(pod *corev1.PodSecurityContext, sc *corev1.SecurityContext) []string {
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	var out []string
	user, group := pod.RunAsUser, pod.RunAsGroup
	if sc.RunAsUser != nil {
		user = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		group = sc.RunAsGroup
	}
	if user != nil {
		u := strconv.FormatInt(*user, 10)
		if group != nil {
			u += ":" + strconv.FormatInt(*group, 10)
		}
		out = append(out, "--user", u)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		out = append(out, "--read-only")
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Drop {
			out = append(out, "--cap-drop", string(cp))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		out = append(out, "--security-opt", "no-new-privileges")
	}
	if sc.Privileged != nil && *sc.Privileged {
		out = append(out, "--privileged")
	}
	return out
}
