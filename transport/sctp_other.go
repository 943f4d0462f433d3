//go:build !linux || 386

package transport

import (
	"context"
	"fmt"
	"runtime"
)

func dialSCTP(context.Context, Endpoint, Options) (Conn, error) {
	return nil, fmt.Errorf("%w (no SCTP support for %s/%s in this build)", ErrSCTPUnsupported, runtime.GOOS, runtime.GOARCH)
}

func listenSCTP(Endpoint, Options) (Listener, error) {
	return nil, fmt.Errorf("%w (no SCTP support for %s/%s in this build)", ErrSCTPUnsupported, runtime.GOOS, runtime.GOARCH)
}
