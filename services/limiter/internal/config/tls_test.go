package config

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles/tlstest"
)

func TestListenerTLSOverrides(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	all, own := tlstest.Files(t, ca.Server(t, "all"), ca), tlstest.Files(t, ca.Server(t, "own"), ca)
	base := []string{"--internal-addr=127.0.0.1:9001", "--grpc-addr=127.0.0.1:9002"}
	tests := []struct {
		name                   string
		args                   []string
		public, internal, grpc tlsfiles.Files
		log                    string
	}{
		{name: "none", log: "config.tls.addr=off config.tls.internal_addr=off config.tls.grpc_addr=off"},
		{name: "every listener", args: []string{"--tls-cert", all.Cert, "--tls-key", all.Key},
			public:   tlsfiles.Files{Cert: all.Cert, Key: all.Key},
			internal: tlsfiles.Files{Cert: all.Cert, Key: all.Key},
			grpc:     tlsfiles.Files{Cert: all.Cert, Key: all.Key},
			log:      "config.tls.addr=tls config.tls.internal_addr=tls config.tls.grpc_addr=tls"},
		{name: "mutual TLS on the internal listener alone",
			args:     []string{"--tls-cert", all.Cert, "--tls-key", all.Key, "--internal-tls-client-ca", own.ClientCA},
			public:   tlsfiles.Files{Cert: all.Cert, Key: all.Key},
			internal: tlsfiles.Files{Cert: all.Cert, Key: all.Key, ClientCA: own.ClientCA},
			grpc:     tlsfiles.Files{Cert: all.Cert, Key: all.Key},
			log:      "config.tls.addr=tls config.tls.internal_addr=mtls config.tls.grpc_addr=tls"},
		{name: "gRPC's own pair keeps the common client CA",
			args:     []string{"--tls-cert", all.Cert, "--tls-key", all.Key, "--tls-client-ca", all.ClientCA, "--grpc-tls-cert", own.Cert, "--grpc-tls-key", own.Key},
			public:   all,
			internal: all,
			grpc:     tlsfiles.Files{Cert: own.Cert, Key: own.Key, ClientCA: all.ClientCA},
			log:      "config.tls.addr=mtls config.tls.internal_addr=mtls config.tls.grpc_addr=mtls"},
		{name: "TLS on gRPC alone", args: []string{"--grpc-tls-cert", own.Cert, "--grpc-tls-key", own.Key},
			grpc: tlsfiles.Files{Cert: own.Cert, Key: own.Key},
			log:  "config.tls.addr=off config.tls.internal_addr=off config.tls.grpc_addr=tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append(base, tt.args...), env(nil))
			require.NoError(t, err)
			public, internal, grpc := c.ListenerTLS()
			assert.Equal(t, []tlsfiles.Files{tt.public, tt.internal, tt.grpc}, []tlsfiles.Files{public, internal, grpc})
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("start", "config", c)
			assert.Contains(t, buf.String(), tt.log)
		})
	}
}

func TestTLSErrorsNameTheField(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	good, other := tlstest.Files(t, ca.Server(t, "good"), ca), tlstest.Files(t, ca.Server(t, "other"), nil)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("-----BEGIN NOTHING-----\n"), 0o600))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name string
		args []string
		env  map[string]string
		yaml string
		want string
	}{
		{name: "cert without key, flag", args: []string{"--tls-cert", good.Cert},
			want: `config: --tls-key: must be set with --tls-cert`},
		{name: "cert without key, env", env: map[string]string{"LIMITER_TLS_CERT": good.Cert},
			want: `config: LIMITER_TLS_KEY: must be set with LIMITER_TLS_CERT`},
		{name: "cert without key, yaml", yaml: "tls:\n  cert: " + good.Cert + "\n",
			want: `config: tls.key: must be set with tls.cert`},
		{name: "key without cert", args: []string{"--internal-addr=127.0.0.1:9001", "--internal-tls-key", good.Key},
			want: `config: --internal-tls-cert: must be set with --internal-tls-key`},
		{name: "client CA without a certificate", env: map[string]string{"LIMITER_TLS_CLIENT_CA": good.ClientCA},
			want: `config: LIMITER_TLS_CLIENT_CA: mutual TLS needs a certificate on the public listener (--addr): set LIMITER_TLS_CERT and LIMITER_TLS_KEY`},
		{name: "gRPC client CA without a certificate", yaml: "grpc_addr: 127.0.0.1:9002\ngrpc_tls: {client_ca: " + good.ClientCA + "}\n",
			want: `config: grpc_tls.client_ca: mutual TLS needs a certificate on the listener of --grpc-addr: set tls.cert and tls.key`},
		{name: "override without its listener", args: []string{"--grpc-tls-cert", good.Cert, "--grpc-tls-key", good.Key},
			want: `config: --grpc-tls-cert: is set but --grpc-addr is not: there is no listener to apply it to`},
		{name: "unreadable cert", args: []string{"--tls-cert", missing, "--tls-key", good.Key},
			want: `config: --tls-cert: "` + missing + `" cannot be read: no such file or directory`},
		{name: "cert not PEM", yaml: "tls: {cert: " + notPEM + ", key: " + good.Key + "}\n",
			want: `config: tls.cert: "` + notPEM + `" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`},
		{name: "key not PEM", env: map[string]string{"LIMITER_TLS_CERT": good.Cert, "LIMITER_TLS_KEY": good.Cert},
			want: `config: LIMITER_TLS_KEY: "` + good.Cert + `" holds no PEM private key (-----BEGIN PRIVATE KEY-----)`},
		{name: "key of another certificate", args: []string{"--tls-cert", good.Cert, "--tls-key", other.Key},
			want: `config: --tls-key: "` + other.Key + `" is not the key of the certificate in ` + good.Cert + `: tls: private key does not match public key`},
		{name: "client CA not PEM", args: []string{"--tls-cert", good.Cert, "--tls-key", good.Key, "--tls-client-ca", notPEM},
			want: `config: --tls-client-ca: "` + notPEM + `" holds no PEM certificate (-----BEGIN CERTIFICATE-----)`},
		{name: "internal override's file", args: []string{"--internal-addr=127.0.0.1:9001", "--tls-cert", good.Cert, "--tls-key", good.Key, "--internal-tls-client-ca", missing},
			want: `config: --internal-tls-client-ca: "` + missing + `" cannot be read: no such file or directory`},
		{name: "named by the source that set it", yaml: "tls: {cert: " + good.Cert + ", key: " + good.Key + "}\n", args: []string{"--tls-key", missing},
			want: `config: --tls-key: "` + missing + `" cannot be read: no such file or directory`},
		{name: "tls not a mapping", yaml: "tls: " + good.Cert + "\n",
			want: `config: tls: must be a mapping (line 1)`},
		{name: "unknown tls key", yaml: "tls: {certificate: " + good.Cert + "}\n",
			want: `config: tls.certificate: unknown key (line 1)`},
		{name: "flat key", yaml: "tls_cert: " + good.Cert + "\n",
			want: `config: tls_cert: unknown key (line 1)`},
		{name: "dotted key", yaml: "tls.cert: " + good.Cert + "\n",
			want: `config: tls.cert: unknown key (line 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.yaml != "" {
				args = append([]string{"--config", writeYAML(t, tt.yaml)}, args...)
			}
			_, err := Load(args, env(tt.env))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestTLSFromEachSourceByPrecedence(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	file, env2, flag := tlstest.Files(t, ca.Server(t, "file"), nil), tlstest.Files(t, ca.Server(t, "env"), nil), tlstest.Files(t, ca.Server(t, "flag"), nil)
	path := writeYAML(t, "tls:\n  cert: "+file.Cert+"\n  key: "+file.Key+"\n")
	c, err := Load([]string{"--config", path}, env(map[string]string{"LIMITER_TLS_KEY": env2.Key, "LIMITER_TLS_CERT": env2.Cert}))
	require.NoError(t, err)
	assert.Equal(t, env2, c.TLS, "the environment wins over the file")
	c, err = Load([]string{"--config", path, "--tls-cert", flag.Cert, "--tls-key", flag.Key}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, flag, c.TLS, "flags win over the file")
}
