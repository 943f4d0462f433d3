// Package wire works on raw Diameter messages (RFC 6733 section 3) as byte
// slices, so the hot path of the peer layer can route, match and replay
// messages without a full decode.
//
// It does no I/O. Its pieces are:
//
//   - ParseHeader and Validate: read and check the 20-byte header. Validate is
//     what a reader must call before it trusts the length field enough to
//     allocate a body.
//   - Getters and in-place patchers (HopByHop, SetHopByHop, SetRetransmit, ...)
//     used for failover replay: a pending request is re-sent on another
//     connection with a new Hop-by-Hop Identifier and the 'T' flag, without
//     re-encoding it.
//   - FindAVP: a bounds-checked scan of the top-level AVPs, for reading
//     Result-Code, Session-Id or Destination-Host cheaply.
//   - Decode: a safe front end to go-diameter's AVP decoder (see Decode for
//     the traps it avoids).
//   - EndToEndGen and HopByHopGen: identifier generators.
//
// Concurrency: the functions are pure and safe for concurrent use as long as
// no two goroutines write the same byte slice (the Set* patchers write to
// their argument). EndToEndGen and HopByHopGen are safe for concurrent use.
package wire
