//go:build !race

package failover

const raceBuild = false
