package peer

import "github.com/aaatp/aaatp/internal/serve"

// Defaults of Server.MaxOpening and Server.MaxOpeningPerAddr.
const (
	DefaultMaxOpening        = serve.DefaultMaxOpening
	DefaultMaxOpeningPerAddr = serve.DefaultMaxOpeningPerAddr
)

// ServerStats are a Server's counters.
type ServerStats struct {
	// Opening is how many accepted connections have not finished their
	// capabilities exchange now.
	Opening int `json:"opening"`
	// RefusedOverLimit counts connections closed at once because
	// MaxOpening or MaxOpeningPerAddr was reached.
	RefusedOverLimit uint64 `json:"refused_over_limit"`
}

// Stats returns the Server's counters. It is safe for concurrent use.
func (s *Server) Stats() ServerStats {
	return ServerStats{Opening: s.open.Opening(), RefusedOverLimit: s.open.Refused()}
}
