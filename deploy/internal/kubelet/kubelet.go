// Package kubelet lays a pod out on the test's machine as the kubelet would
// give it to its container: each volume a folder (ConfigMaps and Secrets
// written the way the kubelet's atomic writer writes them, as a
// ..TIMESTAMP folder behind a ..data link), each mount path mapped onto its
// folder, env values resolved from Secrets and resource limits, and the
// image's own ENV underneath. The deploy module's tests use it to start the
// limiter binary exactly as a rendered or fetched manifest runs it.
package kubelet

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pod holds what the kubelet would find in the cluster for a pod: the
// ConfigMaps and Secrets it mounts or reads, by name then key.
type Pod struct {
	Root       string
	ConfigMaps map[string]map[string]string
	Secrets    map[string]map[string]string
}

// NewPod returns an empty pod whose volumes go under a temporary folder.
func NewPod(t testing.TB) *Pod {
	return &Pod{Root: t.TempDir(), ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string]string{}}
}

// Resolve returns an env var's value as the kubelet would set it.
func (p *Pod) Resolve(t testing.TB, e corev1.EnvVar, c corev1.Container) string {
	t.Helper()
	switch {
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		v, ok := p.Secrets[ref.Name][ref.Key]
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

// Mounts maps a container's paths onto the test's folders.
type Mounts struct {
	Paths   map[string]string // container path -> host path
	WorkDir string            // the host folder standing for the image's WORKDIR, /data
}

// Rewrite replaces a container path in s (an argument, --flag=value or an
// env value) by its host path, the longest mount first; an absolute path
// under no mount fails the test, since the container would not find it.
func (m Mounts) Rewrite(t testing.TB, s string) string {
	t.Helper()
	name, val, isFlag := strings.Cut(s, "=")
	if !isFlag {
		val, name = s, ""
	}
	if !strings.HasPrefix(val, "/") {
		return s
	}
	host, ok := m.host(val)
	if !ok {
		t.Fatalf("%q names a path under no volume mount", s)
	}
	if isFlag {
		return name + "=" + host
	}
	return host
}

// host returns the host path of container path p (p itself or a path
// inside it): under the longest mount that holds it; false when none does.
func (m Mounts) host(p string) (string, bool) {
	best := ""
	for k := range m.Paths {
		if (p == k || strings.HasPrefix(p, k+"/")) && len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return "", false
	}
	return m.Paths[best] + strings.TrimPrefix(p, best), true
}

// Mount lays out every volume c mounts the kubelet's way and maps c's
// mount paths onto them; claims names the volumes that a StatefulSet's
// volumeClaimTemplates provide (an empty folder each). The image's /data
// (its WORKDIR) is a folder of its own when no volume is mounted there. A
// mount inside another mapped path (a ConfigMap at /data/ratelimit/config)
// is laid out inside that path's folder, where the container finds it.
func (p *Pod) Mount(t testing.TB, spec corev1.PodSpec, c corev1.Container, claims ...string) Mounts {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, name := range claims {
		vols[name] = corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	m := Mounts{Paths: map[string]string{}}
	mounts := append([]corev1.VolumeMount(nil), c.VolumeMounts...)
	sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i].MountPath) < len(mounts[j].MountPath) })
	if len(mounts) == 0 || mounts[0].MountPath != "/data" {
		dir := filepath.Join(p.Root, "image-data")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		m.Paths["/data"] = dir
	}
	laid := map[string]string{} // volume name -> its folder
	for _, vm := range mounts {
		v, ok := vols[vm.Name]
		require.True(t, ok, "mount %s names no volume", vm.Name)
		dir, ok := laid[vm.Name]
		if !ok {
			dir = filepath.Join(p.Root, "volumes", vm.Name)
			if host, inside := m.host(vm.MountPath); inside && vm.SubPath == "" && vm.MountPath != "/data" {
				dir = host
			}
			p.layOut(t, v, dir)
			laid[vm.Name] = dir
		}
		m.Paths[vm.MountPath] = filepath.Join(dir, vm.SubPath)
	}
	m.WorkDir = m.Paths["/data"]
	return m
}

// layOut writes volume v into dir as the kubelet does.
func (p *Pod) layOut(t testing.TB, v corev1.Volume, dir string) {
	t.Helper()
	switch {
	case v.ConfigMap != nil:
		data, ok := p.ConfigMaps[v.ConfigMap.Name]
		optional := v.ConfigMap.Optional != nil && *v.ConfigMap.Optional
		require.True(t, ok || optional, "volume %s mounts ConfigMap %s, which the test does not provide", v.Name, v.ConfigMap.Name)
		WriteAtomic(t, dir, data)
	case v.Secret != nil:
		data, ok := p.Secrets[v.Secret.SecretName]
		optional := v.Secret.Optional != nil && *v.Secret.Optional
		require.True(t, ok || optional, "volume %s mounts Secret %s, which the test does not provide", v.Name, v.Secret.SecretName)
		WriteAtomic(t, dir, data)
	case v.EmptyDir != nil:
		require.NoError(t, os.MkdirAll(dir, 0o755))
	default:
		t.Fatalf("volume %s: a kind the test does not lay out", v.Name)
	}
}

// firstVersion is the name of the folder of a volume's first content.
const firstVersion = "..2026_12_06_12_00_00.000000001"

// WriteAtomic writes data into dir as the kubelet writes a ConfigMap or
// Secret volume: the files in a ..TIMESTAMP folder, ..data a link to it,
// and each key a link through ..data.
func WriteAtomic(t testing.TB, dir string, data map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, firstVersion), 0o755))
	for k, v := range data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, firstVersion, k), []byte(v), 0o644))
		require.NoError(t, os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)))
	}
	require.NoError(t, os.Symlink(firstVersion, filepath.Join(dir, "..data")))
}

// Update replaces the content of a volume WriteAtomic wrote as the
// kubelet's atomic writer does when the ConfigMap changes: the new files
// in a new ..TIMESTAMP folder, a ..data_tmp link to it renamed over ..data
// (one rename: a reader sees the old version or the new, never a mix), the
// links of new keys added and of removed keys deleted, and the old folder
// removed.
func Update(t testing.TB, dir string, data map[string]string) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, err)
	ts := time.Now().UTC().Format("..2006_01_02_15_04_05.000000000")
	require.NotEqual(t, old, ts)
	require.NoError(t, os.Mkdir(filepath.Join(dir, ts), 0o755))
	for k, v := range data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, ts, k), []byte(v), 0o644))
	}
	require.NoError(t, os.Symlink(ts, filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if _, keep := data[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			require.NoError(t, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	for k := range data {
		if _, err := os.Lstat(filepath.Join(dir, k)); os.IsNotExist(err) {
			require.NoError(t, os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)))
		}
	}
	require.NoError(t, os.RemoveAll(filepath.Join(dir, old)))
}

// ImageEnv returns the ENV of the Containerfile at path, which a container
// of the image starts with under its pod's env, its paths mapped by m.
func ImageEnv(t testing.TB, path string, m Mounts) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	env, err := ContainerfileEnv(f)
	require.NoError(t, err)
	require.NotEmpty(t, env, "the Containerfile sets no ENV")
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		env[i] = k + "=" + m.Rewrite(t, v)
	}
	return env
}

// ContainerfileEnv reads the KEY=VALUE pairs of a Containerfile's ENV
// instructions (continued lines included).
func ContainerfileEnv(r io.Reader) ([]string, error) {
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
