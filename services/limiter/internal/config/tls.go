package config

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/tollgate/tollgate/services/limiter/internal/tlsfiles"
)

// ListenerTLS returns the TLS files of each listener: TLS, with on the
// internal and the gRPC listener their own certificate and key when set
// (both come from the override together) and their own client CA when set.
// A listener whose Cert is empty serves plain TCP.
func (c Config) ListenerTLS() (public, internal, grpc tlsfiles.Files) {
	return c.TLS, overrideTLS(c.TLS, c.InternalTLS), overrideTLS(c.TLS, c.GRPCTLS)
}

func overrideTLS(base, o tlsfiles.Files) tlsfiles.Files {
	if o.Cert != "" || o.Key != "" {
		base.Cert, base.Key = o.Cert, o.Key
	}
	if o.ClientCA != "" {
		base.ClientCA = o.ClientCA
	}
	return base
}

// tlsGroup is one set of TLS settings: every listener's (prefix "tls-")
// or one listener's overrides.
type tlsGroup struct {
	prefix   string // of the settings' names
	files    tlsfiles.Files
	listener string // "" for every listener's; else its address setting
	addr     string // the listener's address; "" when it is off
}

// checkTLS checks the TLS settings once every source is applied: a
// certificate and its key given together, a client CA only where a
// certificate is served, overrides only for a listener that is on, and
// every file readable and usable (see tlsfiles.Load). Errors name the
// field as from says the user wrote it.
func (c Config) checkTLS(from map[string]source) error {
	byName := make(map[string]setting, len(settings))
	for _, s := range settings {
		byName[s.name] = s
	}
	// field names a setting as written; like is a setting whose source to
	// follow for one the user did not write.
	field := func(name, like string) string {
		src, ok := from[name]
		if !ok {
			src = from[like]
		}
		return byName[name].field(src)
	}
	groups := []tlsGroup{
		{prefix: "tls-", files: c.TLS},
		{prefix: "internal-tls-", files: c.InternalTLS, listener: "internal-addr", addr: c.InternalAddr},
		{prefix: "grpc-tls-", files: c.GRPCTLS, listener: "grpc-addr", addr: c.GRPCAddr},
	}
	for _, g := range groups {
		cert, key, ca := g.prefix+"cert", g.prefix+"key", g.prefix+"client-ca"
		switch f := g.files; {
		case f.Cert != "" && f.Key == "":
			return &Error{Field: field(key, cert), Reason: "must be set with " + field(cert, cert)}
		case f.Key != "" && f.Cert == "":
			return &Error{Field: field(cert, key), Reason: "must be set with " + field(key, key)}
		case g.listener != "" && g.addr == "" && f != (tlsfiles.Files{}):
			some := cert
			if f.Cert == "" {
				some = ca
			}
			return &Error{Field: field(some, some), Reason: "is set but " + field(g.listener, some) + " is not: there is no listener to apply it to"}
		}
	}
	public, internal, grpc := c.ListenerTLS()
	for _, l := range []struct {
		g     tlsGroup
		files tlsfiles.Files
	}{{groups[0], public}, {groups[1], internal}, {groups[2], grpc}} {
		if l.g.listener != "" && l.g.addr == "" {
			continue
		}
		// The setting each file of this listener came from.
		names := map[tlsfiles.Part]string{tlsfiles.PartCert: "tls-cert", tlsfiles.PartKey: "tls-key", tlsfiles.PartClientCA: "tls-client-ca"}
		if l.g.files.Cert != "" {
			names[tlsfiles.PartCert], names[tlsfiles.PartKey] = l.g.prefix+"cert", l.g.prefix+"key"
		}
		if l.g.files.ClientCA != "" {
			names[tlsfiles.PartClientCA] = l.g.prefix + "client-ca"
		}
		if !l.files.Enabled() {
			if l.files.ClientCA != "" {
				ca := names[tlsfiles.PartClientCA]
				return &Error{Field: field(ca, ca), Reason: fmt.Sprintf("mutual TLS needs a certificate on %s: set %s and %s",
					listenerName(l.g.listener), field(names[tlsfiles.PartCert], ca), field(names[tlsfiles.PartKey], ca))}
			}
			continue
		}
		if _, err := tlsfiles.Load(l.files); err != nil {
			var fe *tlsfiles.FileError
			if !errors.As(err, &fe) {
				return err
			}
			name := names[fe.Part]
			return &Error{Field: field(name, name), Reason: fmt.Sprintf("%q %s", fe.Path, fe.Reason)}
		}
	}
	return nil
}

// listenerName names the listener of an address setting for an error.
func listenerName(addrSetting string) string {
	if addrSetting == "" {
		return "the public listener (--addr)"
	}
	return "the listener of --" + addrSetting
}

// tlsLogValue describes the TLS of each listener that is on, for the
// start-up line: "off", "tls" or "mtls".
func (c Config) tlsLogValue() slog.Value {
	mode := func(f tlsfiles.Files) string {
		switch {
		case !f.Enabled():
			return "off"
		case f.ClientCA != "":
			return "mtls"
		}
		return "tls"
	}
	public, internal, grpc := c.ListenerTLS()
	attrs := []slog.Attr{slog.String("addr", mode(public))}
	if c.InternalAddr != "" {
		attrs = append(attrs, slog.String("internal_addr", mode(internal)))
	}
	if c.GRPCAddr != "" {
		attrs = append(attrs, slog.String("grpc_addr", mode(grpc)))
	}
	return slog.GroupValue(attrs...)
}
