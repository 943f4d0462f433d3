package message

// Result codes of the checks a receiver makes on a request before its
// application sees it (RFC 6733 7.1).
const (
	MissingAVP            = 5005 // DIAMETER_MISSING_AVP: Origin-Host or Origin-Realm absent
	AVPOccursTooManyTimes = 5009 // DIAMETER_AVP_OCCURS_TOO_MANY_TIMES
	InvalidAVPLength      = 5014 // DIAMETER_INVALID_AVP_LENGTH: an AVP's length does not fit
)

// Identity AVPs of the base protocol (RFC 6733 6): every one is a
// DiameterIdentity, checked with CheckIdentity when a peer sends it.
const RouteRecord = 282
