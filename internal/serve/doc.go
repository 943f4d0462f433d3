// Package serve is the server core every listener shares, whatever its
// protocol (Diameter, RADIUS over TCP, TLS and UDP): the accept loop that
// backs off and never stops while the process lives (Accept), the limits
// on connections, overall and per source address (an IPv6 /64 counting
// as one address), where a new connection over a limit makes room by
// closing the oldest connection not admitted yet rather than being
// refused, so that connections without credentials cannot keep a peer
// that holds them out (Admission), the bound on a connection's
// unanswered requests (Backlog), the handler budgets that keep one kind
// of work from starving another (Lane), and the rate-limited log lines
// with their counters (Log).
//
// Everything here is safe for concurrent use unless its doc says who
// guards it.
package serve
