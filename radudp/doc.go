// Package radudp is aaatp's RADIUS client over UDP (radius:// URLs:
// retransmissions as RFC 2865 and RFC 5080 want them), with the server
// states of the Nokia 7750 SR radius-server-policy, its access algorithms
// with failover, and the Cisco ASR5K throttling of RADIUS records. RADIUS
// over TCP (radius+tcp://, RFC 6613) and TLS (radsec://, RFC 6614), with
// the RFC 3539 watchdog, goes through package client, as Diameter does.
//
// A [Peer] talks to one server. A request goes out on an Identifier of one
// of its sockets, the least recently used one, and is retransmitted byte
// for byte (same Identifier, authenticator and source port) every
// [PeerConfig.Timeout] until it is answered or has been sent
// [PeerConfig.Retries] times. A reply is matched by Identifier and verified
// against the request's authenticator; one that arrives after its request
// was answered (a duplicate) or given up on (late), or that does not
// verify, is dropped and counted. When all 256 Identifiers of the open
// sockets are in use another socket is opened, up to
// [PeerConfig.MaxSockets].
//
// A [Client] sends over several servers. Each server is in one of the 7750
// SR states (package policy): unknown until its first reply, then in
// service; the down-timeout, started when a request is sent and reset by
// any reply from the server, puts it out of service when it expires; after
// the hold-down it is probed with exactly one message, never retried (the
// test user's Access-Request, a Status-Server, or one real request whose
// caller then gets [ErrProbeFailed]), and a reply puts it back in service.
// The access algorithm (package loadbalance: direct, round-robin, hash)
// picks a server in service; when its retries are exhausted the request
// goes to the next server in service, encoded afresh for that server (new
// Identifier and authenticators, hidden attributes re-encrypted with its
// secret), each server at most once. The throttle (package throttle) holds
// requests in its instance and server queues until their server's rate
// slot and a free outstanding place allow them, authentication and
// accounting separately. A caller gets one answer or one error, a
// [*FailedError] naming the servers tried.
//
// Every state change, failover and queue alarm is published on the
// Client's events bus (package client's Event kinds).
//
// The server side of RADIUS over UDP, with the RFC 5080 duplicate cache,
// is package radpeer's UDPServer.
//
// Peer and Client are safe for concurrent use.
package radudp
