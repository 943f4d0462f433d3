package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is this process's user+system CPU time so far (getrusage
// RUSAGE_SELF): client and server sides together when both are in-process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssKiB is VmRSS from /proc/self/status, in KiB (0 when unavailable).
func rssKiB() float64 {
	return procStatusKiB("VmRSS:")
}

func procStatusKiB(field string) float64 { return statusKiB("/proc/self/status", field) }

// statusKiB reads a "Field: N kB" line of a /proc/PID/status file.
func statusKiB(path, field string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			v, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return v
		}
	}
	return 0
}

// raiseNoFile raises RLIMIT_NOFILE to at least n (the hard limit too when
// allowed, else up to the hard limit) and returns the soft limit now in
// force. Raising the hard limit needs CAP_SYS_RESOURCE.
func raiseNoFile(n int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	want := uint64(n)
	if rl.Cur >= want {
		return int(rl.Cur)
	}
	nl := syscall.Rlimit{Cur: want, Max: max(rl.Max, want)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl) != nil {
		nl = syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl)
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(rl.Cur)
}

// fdHeadroom is what a process keeps free of RLIMIT_NOFILE besides its
// peers' sockets (listeners, pipes, the runtime's own).
const fdHeadroom = 1024

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return runtime.GOOS + " " + strings.TrimSpace(string(b))
}

func printHeader(w io.Writer, o Options) {
	fmt.Fprintf(w, "# aaatp benchmark harness (%s mode)\n\n", o.Name)
	fmt.Fprintf(w, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "- cpu: %s, %d cores (GOMAXPROCS %d), %s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), kernel())
	fmt.Fprintf(w, "- loopback TCP; client and server in the same process for the round trips and failover (cpu us/req and allocs/req count both sides)\n\n")
}
