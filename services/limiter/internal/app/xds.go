package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
	"github.com/tollgate/tollgate/services/limiter/internal/xds"
)

// followXDS subscribes to the Envoy rules of --envoy-xds-server until ctx
// is done, applying each version with applyXDS; without a server it does
// nothing.
func (a *App) followXDS(ctx context.Context) {
	if a.xds == nil {
		return
	}
	if err := a.xds.Run(ctx); err != nil {
		a.log.Error("xDS: no subscription; the Envoy rules stay as they are", "error", err.Error())
	}
}

// newXDS returns the xDS client of cfg, nil without --envoy-xds-server. Its
// settings are checked here, so that a contradiction or an unreadable
// file fails the start: the rules come from one source, and TLS files
// mean nothing without TLS.
func (a *App) newXDS(cfg config.Config) (*xds.Client, error) {
	switch {
	case cfg.EnvoyXDSServer != "" && cfg.EnvoyConfig != "":
		return nil, &config.Error{Field: "envoy-xds-server", Reason: "exclusive with --envoy-config: the Envoy rules come either from a folder or from an xDS management server; set one"}
	case !cfg.EnvoyXDSTLS && (cfg.EnvoyXDSTLSCA != "" || cfg.EnvoyXDSTLSCert != "" || cfg.EnvoyXDSTLSKey != "" || cfg.EnvoyXDSTLSServerName != ""):
		return nil, &config.Error{Field: "envoy-xds-tls", Reason: "--envoy-xds-tls-ca, -cert, -key and -server-name need --envoy-xds-tls"}
	case cfg.EnvoyXDSServer == "" && cfg.EnvoyXDSTLS:
		return nil, &config.Error{Field: "envoy-xds-tls", Reason: "needs --envoy-xds-server"}
	case cfg.EnvoyXDSServer == "":
		return nil, nil
	}
	creds, err := xdsCredentials(cfg)
	if err != nil {
		return nil, err
	}
	return xds.New(cfg.EnvoyXDSServer, cfg.EnvoyXDSNodeID, envoyrules.XDSTypeURL, creds, a.applyXDS, a.log), nil
}

// xdsCredentials are the TLS credentials of the xDS connection; nil for
// plaintext.
func xdsCredentials(cfg config.Config) (credentials.TransportCredentials, error) {
	if !cfg.EnvoyXDSTLS {
		return nil, nil
	}
	tc, err := clientTLSFiles("envoy-xds-tls-", cfg.EnvoyXDSTLSCA, cfg.EnvoyXDSTLSCert, cfg.EnvoyXDSTLSKey)
	if err != nil {
		return nil, err
	}
	tc.ServerName = cfg.EnvoyXDSTLSServerName
	return credentials.NewTLS(tc), nil
}

// clientTLSFiles is the TLS of a client connection whose settings are named
// prefix+"ca", "cert" and "key": the CAs in the PEM file ca (empty: the
// system's) and the client certificate in cert and key (both or neither),
// read now; an error names the setting at fault.
func clientTLSFiles(prefix, ca, cert, key string) (*tls.Config, error) {
	if (cert == "") != (key == "") {
		return nil, &config.Error{Field: prefix + "cert", Reason: "--" + prefix + "cert and --" + prefix + "key go together"}
	}
	tc := &tls.Config{MinVersion: tlsfiles.MinVersion}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &config.Error{Field: prefix + "ca", Reason: err.Error()}
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, &config.Error{Field: prefix + "ca", Reason: "no PEM certificate in " + ca}
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &config.Error{Field: prefix + "cert", Reason: err.Error()}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// applyXDS applies one version pushed by the management server: every
// resource read as one Envoy file (see envoyrules.Rules.AddXDS), the rules
// built whole, then published with the policies in force through the same
// snapshot as a reload, so that each request sees either the old rules or
// the new ones. Any error leaves the running rules in place and is the
// NACK's detail; so is a version without any domain while rules run,
// unless --envoy-allow-empty-reload.
func (a *App) applyXDS(version string, resources []*anypb.Any) error {
	configs := make([]*rlsconfv3.RateLimitConfig, len(resources))
	for i, res := range resources {
		configs[i] = &rlsconfv3.RateLimitConfig{}
		if err := res.UnmarshalTo(configs[i]); err != nil {
			return fmt.Errorf("resource %d: %w", i, err)
		}
	}
	// By name, as the folder's files are read by file name: a management
	// server sends a version's resources in any order (go-control-plane's
	// is its map's), and the order decides which error a bad version is
	// refused with and, with --envoy-merge-domain-config, the order of one
	// domain's rules; every instance must build the same rules.
	slices.SortStableFunc(configs, func(x, y *rlsconfv3.RateLimitConfig) int { return strings.Compare(x.GetName(), y.GetName()) })
	rules := envoyrules.NewRules(envoyOptions(a.cfg))
	for _, c := range configs {
		if err := rules.AddXDS(c); err != nil {
			return err
		}
	}
	a.reloading.Lock()
	defer a.reloading.Unlock()
	err := errEmptyRules
	if !emptied(a.current.Load().Envoy, rules) || a.running.EnvoyAllowEmptyReload {
		err = a.publish(context.Background(), a.running, rules)
	}
	if err != nil {
		a.reloads.WithLabelValues(reloadFailed).Inc()
		return err
	}
	a.reloads.WithLabelValues(reloadSucceeded).Inc()
	a.log.Info("xDS: Envoy rules applied", "version", version, "domains", rules.Domains())
	return nil
}

// errEmptyRules refuses rules without any domain in place of rules with
// some: every descriptor would then be answered OK with no limit.
var errEmptyRules = errors.New("no domain any more: every descriptor would be answered OK with no limit; set --envoy-allow-empty-reload to mean it")
