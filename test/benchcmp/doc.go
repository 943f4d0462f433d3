// Package benchcmp compares Diameter request/answer round trips on loopback
// TCP for three implementations over the same ACR bytes: a minimal raw Go
// client and server (the bound), go-diameter v4's own client and server,
// and aaatp's peer package. The implementations are exported (StartRaw,
// StartPingPong, StartGoDiameter, StartAaatp, Run, RunFor) so that the
// harness in test/bench runs the very same code as the Go benchmarks:
//
//	go test -run '^$' -bench . -benchmem ./test/benchcmp
//
// TestSanity runs each implementation for 100 requests and checks every
// answer (Result-Code 2001, Hop-by-Hop and End-to-End ids matched), so
// plain `go test ./...` exercises the code.
package benchcmp
