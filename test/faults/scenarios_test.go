package faults

import (
	"syscall"
	"testing"
	"time"
)

type delaySpec struct{ delay, jitter time.Duration }

// scenario is one fault and what RFC 3539 says must follow. Server 1 is
// the primary (client --mode failover sends to the first peer in service),
// server 2 the alternate.
type scenario struct {
	name        string
	tag         string // short, in namespace names
	servers     int
	rate        int
	concurrency int
	duration    time.Duration // client --duration
	timeout     time.Duration // client --timeout, per request
	delay       delaySpec     // for the delay scenario
	proxy       bool          // set when the delay comes from the userspace proxy
	inject      func(h *harness)

	// Expectations.
	detect      string // first transition out of OKAY after the fault: "SUSPECT", "DOWN", or "" for none
	movedAny    bool   // requests were pending when the fault hit: failover must move some
	alternate   bool   // another server stays in service: moved requests go to it
	reopen      []int  // servers that must come back DOWN -> REOPEN -> OKAY
	transitions int    // watchdog transitions on the client after the fault, all peers: at most this many
	killed      bool   // an incarnation was SIGKILLed: its report is missing
}

const warmup = 3 * time.Second // traffic before the fault

var scenarios = []*scenario{
	{
		name: "baseline", tag: "base", duration: 15 * time.Second,
	},
	{
		name: "blackhole", tag: "bh", duration: 30 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			h.fault("iptables DROP both ways on s1's link (never healed)")
			addRules(h.t, blackholeRules(s.ns, "c")...)
		},
		detect: "SUSPECT", movedAny: true, alternate: true, transitions: 2, // OKAY>SUSPECT>DOWN
	},
	{
		name: "loss-15%", tag: "loss", duration: 25 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			h.fault("iptables statistic random DROP 15% each way on s1's link")
			heal := addRules(h.t, lossRules(s.ns, "c", 0.15)...)
			h.sleep(20 * time.Second)
			n, err := droppedPackets(s.ns)
			if err != nil || n == 0 {
				h.t.Errorf("loss rules dropped %d packets (%v): the fault was not applied", n, err)
			}
			heal()
			h.logf("loss rules removed after dropping %d packets", n)
		},
	},
	{
		name: "bandwidth-16kbit", tag: "bw", duration: 25 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			spec := []string{"tbf", "rate", "16kbit", "burst", "2kb", "latency", "1s"}
			h.fault("tc tbf 16kbit both ways on s1's link for 18 s")
			healS := qdisc(h.t, s.ns, "c", spec...)
			healC := qdisc(h.t, h.cns, s.clientIf(), spec...)
			h.sleep(18 * time.Second)
			healS()
			healC()
			h.logf("tbf removed")
		},
	},
	{
		name: "delay-3s-rtt", tag: "dly", duration: 30 * time.Second,
		delay: delaySpec{1500 * time.Millisecond, 250 * time.Millisecond},
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			d := h.sc.delay
			var heal func()
			if h.sc.proxy {
				h.fault("userspace proxy: delay " + d.delay.String() + " +- " + d.jitter.String() + " each way on s1 (RTT about 3 s, below Tw's minimum of 4 s)")
				if err := s.proxy.signal(syscall.SIGUSR1); err != nil {
					h.t.Fatal(err)
				}
				heal = func() { _ = s.proxy.signal(syscall.SIGUSR2) }
			} else {
				spec := []string{"netem", "delay", d.delay.String(), d.jitter.String()}
				h.fault("tc netem: delay " + d.delay.String() + " +- " + d.jitter.String() + " each way on s1's link (RTT about 3 s, below Tw's minimum of 4 s)")
				hs := qdisc(h.t, s.ns, "c", spec...)
				hc := qdisc(h.t, h.cns, s.clientIf(), spec...)
				heal = func() { hs(); hc() }
			}
			h.sleep(22 * time.Second)
			heal()
			h.logf("delay removed")
		},
	},
	{
		name: "tcp-reset", tag: "rst", duration: 45 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			h.fault("iptables REJECT --reject-with tcp-reset on s1's link for 12 s")
			heal := addRules(h.t, resetRules(h.servers[0].ns, "c")...)
			h.sleep(12 * time.Second)
			heal()
			h.logf("reset rule removed")
		},
		detect: "DOWN", alternate: true, reopen: []int{1}, transitions: 3, // OKAY>DOWN>REOPEN>OKAY
	},
	{
		name: "link-down-up", tag: "link", duration: 60 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			h.fault("ip link set down: s1's veth in the client namespace, for 30 s")
			setLink(h.t, h.cns, s.clientIf(), false)
			h.t.Cleanup(func() { _, _ = sh("ip", "-n", h.cns, "link", "set", s.clientIf(), "up") })
			h.sleep(30 * time.Second)
			setLink(h.t, h.cns, s.clientIf(), true)
			h.logf("link up")
		},
		detect: "SUSPECT", movedAny: true, alternate: true, reopen: []int{1}, transitions: 4,
	},
	{
		name: "partition-heal", tag: "part", duration: 60 * time.Second, timeout: 90 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			var rules []rule
			for _, s := range h.servers {
				rules = append(rules, blackholeRules(s.ns, "c")...)
			}
			h.fault("partition: client cut from every server for 30 s")
			heal := addRules(h.t, rules...)
			h.sleep(30 * time.Second)
			heal()
			h.logf("partition healed")
		},
		detect: "SUSPECT", movedAny: true, reopen: []int{1, 2}, transitions: 8,
	},
	{
		name: "sigstop-sigcont", tag: "stop", duration: 60 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			h.fault("SIGSTOP s1 for 30 s (the kernel still ACKs)")
			h.signalServer(s, syscall.SIGSTOP)
			h.sleep(30 * time.Second)
			h.signalServer(s, syscall.SIGCONT)
			h.logf("SIGCONT s1")
		},
		detect: "SUSPECT", movedAny: true, alternate: true, reopen: []int{1}, transitions: 4,
	},
	{
		name: "sigkill-restart", tag: "kill", duration: 40 * time.Second,
		inject: func(h *harness) {
			h.sleep(warmup)
			s := h.servers[0]
			h.fault("SIGKILL s1")
			s.proc.kill()
			h.sleep(5 * time.Second)
			h.startServer(s)
			h.logf("s1 restarted")
		},
		detect: "DOWN", alternate: true, reopen: []int{1}, transitions: 3, killed: true,
	},
}

func TestFaults(t *testing.T) {
	requireSuite(t)
	for _, sc := range scenarios {
		if sc.servers == 0 {
			sc.servers = 2
		}
		if sc.rate == 0 {
			sc.rate = 20
		}
		if sc.concurrency == 0 {
			sc.concurrency = 8
		}
		if sc.timeout == 0 {
			sc.timeout = 30 * time.Second
		}
		sc.proxy = sc.delay.delay > 0 && !suite.netem
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, sc)
		})
	}
}
