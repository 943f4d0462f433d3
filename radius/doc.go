// Package radius is the RADIUS wire format as aaatp carries it over
// streams (RFC 6613 RADIUS/TCP, RFC 6614 RADIUS/TLS): the framing on the
// Length field, the Request and Response Authenticators of every code
// (RFC 2865, 2866, 5176, 5997), Message-Authenticator (RFC 3579, 2869) and
// the copying of Proxy-State into answers.
//
// Attributes, dictionaries and the hiding of User-Password and
// Tunnel-Password come from layeh.com/radius (imported here as lradius);
// this package adds what that library leaves out: it has no stream
// framing, and it neither computes nor checks Message-Authenticator.
//
// Packets travel as raw bytes. [ReadFrame] returns exactly one packet whose
// length and attribute layout [Validate] has checked, so a later decode
// never reads past it. [EncodeRequest] turns a [Request] (attributes with
// hidden values in the clear) into signed bytes for one send: a new
// Identifier, a new Request Authenticator, hidden attributes encrypted
// with that send's secret and authenticator, and a Message-Authenticator
// on every Access-Request and Status-Server. [VerifyResponse] checks an
// answer against the request it answers. Servers use [VerifyRequest] and
// [EncodeResponse].
//
// Errors: a frame that breaks the framing rules matches [ErrBadFrame]; an
// authenticator or Message-Authenticator that does not verify matches
// [ErrAuthenticator]. Both mean "close this connection" over TCP and TLS
// (RFC 6613 section 2.6.4); a missing Message-Authenticator that the
// caller required matches [ErrNoMessageAuthenticator] and means "drop the
// packet".
//
// Every function is safe for concurrent use; none retains its arguments.
package radius
