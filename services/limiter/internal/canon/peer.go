package canon

import (
	"fmt"
	"net"
	"net/netip"
)

// DefaultIPv6Prefix is how many leading bits of an IPv6 address name one
// client: a /64 is what one subscriber or one host usually holds, so keying
// by the full address would give its holder 2^64 budgets.
const DefaultIPv6Prefix = 64

// Peer returns the rate-limit key of a client address: an IPv4 address (an
// IPv4-mapped IPv6 address such as ::ffff:1.2.3.4 folded to 1.2.3.4) as
// itself, an IPv6 address as its prefix of v6Bits bits in CIDR notation
// ("2001:db8:1:2::/64"; the address itself when v6Bits is 128). Zones are
// dropped. v6Bits outside 1..128 is an error.
func Peer(addr netip.Addr, v6Bits int) (string, error) {
	if v6Bits < 1 || v6Bits > 128 {
		return "", fmt.Errorf("canon: IPv6 prefix /%d: want 1..128", v6Bits)
	}
	if !addr.IsValid() {
		return "", fmt.Errorf("canon: no address")
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() || v6Bits == 128 {
		return addr.String(), nil
	}
	p, err := addr.Prefix(v6Bits)
	if err != nil {
		return "", fmt.Errorf("canon: %w", err)
	}
	return p.String(), nil
}

// PeerString is Peer for an address written as text, "host:port" (as
// http.Request.RemoteAddr) or a bare host.
func PeerString(s string, v6Bits int) (string, error) {
	host := s
	if h, _, err := net.SplitHostPort(s); err == nil {
		host = h
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("canon: peer address %q: %w", s, err)
	}
	return Peer(addr, v6Bits)
}
