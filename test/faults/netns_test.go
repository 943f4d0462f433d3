package faults

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nsPrefix names every namespace this suite creates; TestMain removes any
// left over from a killed run.
const nsPrefix = "aaatpf-"

// sh runs a command and returns its combined output.
func sh(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// must runs a command and fails the test if it fails.
func must(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := sh(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// killNamespace kills every process still in ns and deletes it.
func killNamespace(ns string) {
	if out, err := sh("ip", "netns", "pids", ns); err == nil {
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for range 20 {
		if _, err := sh("ip", "netns", "del", ns); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sweepNamespaces removes namespaces left by an earlier run.
func sweepNamespaces() []string {
	out, err := sh("ip", "netns", "list")
	if err != nil {
		return nil
	}
	var swept []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
			killNamespace(f[0])
			swept = append(swept, f[0])
		}
	}
	return swept
}

// addNamespace creates ns with lo up; t.Cleanup deletes it and kills what
// runs in it.
func addNamespace(t testing.TB, ns string) {
	t.Helper()
	must(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { killNamespace(ns) })
	must(t, "ip", "-n", ns, "link", "set", "lo", "up")
}

// link joins namespaces a and b with a veth pair, ifA in a with addrA and
// ifB in b with addrB (CIDR). The pair is created inside the namespaces,
// so its names never touch the host's.
func link(t testing.TB, a, ifA, addrA, b, ifB, addrB string) {
	t.Helper()
	must(t, "ip", "-n", a, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b)
	must(t, "ip", "-n", a, "addr", "add", addrA, "dev", ifA)
	must(t, "ip", "-n", b, "addr", "add", addrB, "dev", ifB)
	must(t, "ip", "-n", a, "link", "set", ifA, "up")
	must(t, "ip", "-n", b, "link", "set", ifB, "up")
}

// rule is one iptables rule in a namespace, added with -A and removed
// with -D.
type rule struct {
	ns    string
	chain string
	spec  []string
}

func (r rule) args(op string) []string {
	return append([]string{"netns", "exec", r.ns, "iptables", "-w", op, r.chain}, r.spec...)
}

// addRules adds rules; the returned heal removes them (idempotent, also
// registered with t.Cleanup; the namespace's deletion would drop them too).
func addRules(t testing.TB, rules ...rule) (heal func()) {
	t.Helper()
	var added []rule
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		for i := len(added) - 1; i >= 0; i-- {
			if _, err := sh("ip", added[i].args("-D")...); err != nil {
				t.Logf("heal: %v", err)
			}
		}
	}
	t.Cleanup(heal)
	for _, r := range rules {
		must(t, "ip", r.args("-A")...)
		added = append(added, r)
	}
	return heal
}

// blackholeRules drop everything in and out of interface dev of ns.
func blackholeRules(ns, dev string) []rule {
	return []rule{
		{ns, "INPUT", []string{"-i", dev, "-j", "DROP"}},
		{ns, "OUTPUT", []string{"-o", dev, "-j", "DROP"}},
	}
}

// lossRules drop a random fraction p of the packets each way on dev.
func lossRules(ns, dev string, p float64) []rule {
	ps := strconv.FormatFloat(p, 'f', 3, 64)
	return []rule{
		{ns, "INPUT", []string{"-i", dev, "-m", "statistic", "--mode", "random", "--probability", ps, "-j", "DROP"}},
		{ns, "OUTPUT", []string{"-o", dev, "-m", "statistic", "--mode", "random", "--probability", ps, "-j", "DROP"}},
	}
}

// resetRules answer every TCP segment arriving on dev with a RST.
func resetRules(ns, dev string) []rule {
	return []rule{{ns, "INPUT", []string{"-i", dev, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}}}
}

// qdisc sets a root qdisc on dev in ns (tc ... root <spec>); the returned
// heal deletes it.
func qdisc(t testing.TB, ns, dev string, spec ...string) (heal func()) {
	t.Helper()
	must(t, "ip", append([]string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"}, spec...)...)
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		if _, err := sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"); err != nil {
			t.Logf("heal: %v", err)
		}
	}
	t.Cleanup(heal)
	return heal
}

// setLink sets dev in ns up or down.
func setLink(t testing.TB, ns, dev string, up bool) {
	t.Helper()
	st := "down"
	if up {
		st = "up"
	}
	must(t, "ip", "-n", ns, "link", "set", dev, st)
}

// probeNetns reports why namespaces cannot be used here, or "" if they can;
// netem reports whether the kernel has sch_netem.
func probeNetns() (reason string, netem bool) {
	if os.Geteuid() != 0 {
		return "not root: the fault suite creates network namespaces", false
	}
	for _, tool := range []string{"ip", "iptables", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not installed (apt-get install iproute2 iptables)", false
		}
	}
	ns := nsPrefix + "probe"
	killNamespace(ns)
	if _, err := sh("ip", "netns", "add", ns); err != nil {
		return "network namespaces unavailable: " + err.Error(), false
	}
	defer killNamespace(ns)
	if _, err := sh("ip", "netns", "exec", ns, "iptables", "-w", "-L", "-n"); err != nil {
		return "iptables unusable in a namespace: " + err.Error(), false
	}
	_, err := sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	return "", err == nil
}

// droppedPackets sums the packet counters of the DROP rules in ns's INPUT
// and OUTPUT chains: proof that a loss rule did drop something.
func droppedPackets(ns string) (uint64, error) {
	var n uint64
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		out, err := sh("ip", "netns", "exec", ns, "iptables", "-w", "-L", chain, "-v", "-n", "-x")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 2 && f[2] == "DROP" {
				if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					n += v
				}
			}
		}
	}
	return n, nil
}
