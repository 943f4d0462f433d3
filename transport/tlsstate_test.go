package transport

import "crypto/tls"

type tlsState = tls.ConnectionState
