// Package radpeer carries RADIUS over streams (radius+tcp://, RFC 6613;
// radsec://, RFC 6614) and over UDP (radius://), for clients and servers,
// on the same watchdog and duplicate store as aaatp's Diameter.
//
// # Clients
//
// [Dial] returns a [Peer]: one RADIUS server, reached over one or more
// connections (Config.MaxConns). Each connection runs package watchdog's
// RFC 3539 machine unchanged, with Status-Server (RFC 5997) as its
// watchdog message: sent on the reserved Identifier 0 with a fresh
// authenticator and a Message-Authenticator, never retransmitted; any
// verified reply to it is the watchdog answer, any other verified answer
// resets Tw. A reopened connection carries traffic again after three
// answered Status-Servers. The server is in service while any of its
// connections is OKAY.
//
// A request is a radius.Request (hidden attributes in the clear), sent
// with [Peer.Exchange], or over several servers with failover by
// package client's Client.Exchange. Each send encodes and signs the request afresh for the
// connection it goes to: an Identifier from 1 to 255, reused least
// recently, a new Request Authenticator, a Message-Authenticator on
// Access-Request, passwords hidden with that connection's secret. When
// every Identifier of every connection is taken, a further connection is
// opened (up to MaxConns) and the call waits (up to MaxWaiting). Answers
// are matched by Identifier, then verified against that send's
// authenticator; one that fails closes the connection (RFC 6613 2.6.4),
// one on an unused Identifier is dropped and counted. A connection whose
// first answer fails, or that the server closes after requests and before
// any answer passed (as aaatp's Server does with requests that fail its
// own check), is named a likely shared secret mismatch: counted and explained
// in [Stats] (SecretMismatch, SecretMismatchReason), logged, and the error
// of the requests that fail with it matches [ErrSecretMismatch]; so does
// the error of one handed on to a [Config.Failover] that fails later (its
// deadline).
//
// A request completes once, with a [Response] or an error. Behind a
// Client that dispatches it, when a connection leaves service (SUSPECT,
// DOWN) its requests go to another server, in send order, each with a new
// Identifier and signed afresh for that server; they stay matched where
// they were, so a late answer still completes them once.
//
// The client side of RADIUS over UDP is a [UDPPeer] per server
// (radius://, [ParseUDPURL]): byte-identical retransmissions every
// timeout up to the retries, then the request is handed on to another
// server as a refusal, each server at most once. Package client
// dispatches over Peers and UDPPeers alike, with the Nokia 7750 SR server
// states and the ASR5K throttle.
//
// # Servers
//
// [NewServer] serves a stream listener from [Listen]; [NewUDPServer] a UDP
// socket, with the RFC 5080 duplicate cache. Both answer Status-Server
// themselves and give other requests to a [Handler]; [Dedup] wraps one so
// that each accounting record ([AccountingKey]) is applied once across
// every server sharing a dedup.Store. With ServerConfig.Clients, a server
// knows its clients by source address, each with its own secret and name,
// and refuses the other sources; [UDPServer.Shutdown] ends a UDP server
// after answering what it had read, for a server handing its socket over
// to another.
//
// Peer, UDPPeer, Server and UDPServer are safe for concurrent use.
// Events are package peer's, on a peer.Bus, so the status page and metrics
// that watch Diameter peers watch these too.
package radpeer
