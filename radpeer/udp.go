package radpeer

import (
	"fmt"
	"net/url"
	"strings"
)

// SchemeUDP is the URL scheme of RADIUS over UDP (RFC 2865).
const SchemeUDP = "radius"

// ParseUDPURL parses radius://host:port and returns "host:port": a
// server's address for NewUDPPeer and NewUDPServer.
func ParseUDPURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || !strings.EqualFold(u.Scheme, SchemeUDP) {
		return "", fmt.Errorf("radpeer: URL %q: want radius://host:port", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Port() == "" || u.Hostname() == "" {
		return "", fmt.Errorf("radpeer: URL %q: want radius://host:port", s)
	}
	return u.Host, nil
}
