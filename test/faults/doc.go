// Package faults is aaatp's fault suite: real aaa-peer processes in
// network namespaces joined by veth pairs, with faults applied to the
// links (iptables DROP, random loss, tcp-reset, tbf, link down, netem or a
// userspace delay proxy) and to the processes (SIGSTOP/SIGCONT, SIGKILL
// and restart). Every scenario checks the RFC 3539 promises from the
// client's --events and --report, the servers' reports and the shared
// Redis duplicate store, and the suite prints a scenario table at the end.
//
// It needs root and ip netns; it skips otherwise, except with CI=true,
// where it fails instead. Run it with:
//
//	go test -race -v ./test/faults
package faults
