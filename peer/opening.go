package peer

import "github.com/aaatp/aaatp/internal/serve"

// Defaults of Server.MaxOpening, Server.MaxOpeningPerAddr,
// Server.MaxConnections and Server.MaxConnectionsPerAddr.
const (
	DefaultMaxOpening            = serve.DefaultMaxOpening
	DefaultMaxOpeningPerAddr     = serve.DefaultMaxOpeningPerAddr
	DefaultMaxConnections        = serve.DefaultMaxConns
	DefaultMaxConnectionsPerAddr = serve.DefaultMaxConnsPerAddr
)

// ServerStats are a Server's counters.
type ServerStats struct {
	// Open is how many accepted connections are open now, admitted or
	// not; Opening how many of them have not finished their
	// capabilities exchange.
	Open    int `json:"open"`
	Opening int `json:"opening"`
	// RefusedOverLimit counts connections closed at once because
	// MaxConnections, MaxConnectionsPerAddr, MaxOpening or
	// MaxOpeningPerAddr was reached.
	RefusedOverLimit uint64 `json:"refused_over_limit"`
	// EvictedUnadmitted counts connections that had not finished their
	// capabilities exchange, closed to make room for a new one over
	// those limits.
	EvictedUnadmitted uint64 `json:"evicted_unadmitted"`
}

// Stats returns the Server's counters. It is safe for concurrent use.
func (s *Server) Stats() ServerStats {
	return ServerStats{Open: s.open.Open(), Opening: s.open.Opening(), RefusedOverLimit: s.open.Refused(), EvictedUnadmitted: s.open.Evicted()}
}
