//go:build race

package failover

// raceBuild: this test binary runs under the race detector, so aaa-peer is
// built with -race too and a data race in it fails the test (exit 66).
const raceBuild = true
