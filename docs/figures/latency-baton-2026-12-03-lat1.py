#!/usr/bin/env python3
"""1-caller cross-process latency, pairs side by side, round after round
(docs/figures/latency-baton-2026-12-03.md; a copy of latency-2026-12-03-lat1.py
with the variants old, oldc and olds, which run $BIN/aaa-peer-old, built from
the tree before the change, as both sides, the client or the server).

usage: latency-2026-12-03-lat1.py ROUNDS DURATION PAIRS
PAIRS: comma-separated CLIENT+SERVER[:VARIANT] with clients pingpong,
godiameter, aaa-peer and servers rawinline, godiameter, aaa-peer; VARIANT
is a key of VARIANTS (environment or flags of the aaa-peer processes; fin*,
spin* and baton* need the prototype builds of
latency-2026-12-03-prototype.diff as $BIN/aaa-peer-fin, $BIN/aaa-peer-baton).
Binaries: $BIN/bench (go build -o $BIN/bench ./test/bench: its
AAATP_BENCH_ROLE roles are the harness's raw and go-diameter processes) and
$BIN/aaa-peer (go build ./cmd/aaa-peer), never committed.
Prints one line per run (with the 1-minute load average) and a summary
(median, min-max) per pair, with p50 / ping-pong p50 round by round.
"""
import json, os, subprocess, sys, tempfile, time, statistics

BIN = os.environ.get("BIN", "/tmp/lat/bin")
BENCH = os.path.join(BIN, "bench")
AAA = os.environ.get("AAA", os.path.join(BIN, "aaa-peer"))
PROF = os.environ.get("PROF")  # directory: aaa-peer --cpuprofile files


def xenv(name):
    """os.environ plus $name's space-separated K=V pairs (aaa-peer processes only)."""
    e = dict(os.environ)
    for kv in os.environ.get(name, "").split():
        k, v = kv.split("=", 1)
        e[k] = v
    return e


# variants: PAIR:NAME applies these to the pair's processes
VARIANTS = {
    "": {},
    "cg1": {"client_env": {"GOMAXPROCS": "1"}},
    "sg1": {"server_env": {"GOMAXPROCS": "1"}},
    "g1": {"client_env": {"GOMAXPROCS": "1"}, "server_env": {"GOMAXPROCS": "1"}},
    "guard": {"server_args": ["--inline-handler-time", "10s"]},
    "cg1guard": {"client_env": {"GOMAXPROCS": "1"}, "server_args": ["--inline-handler-time", "10s"]},
    "guard5ms": {"server_args": ["--inline-handler-time", "5ms"]},
    "guard50ms": {"server_args": ["--inline-handler-time", "50ms"]},
    "workers": {"server_args": ["--inline-handler-time", "-1ns"]},
    "fin0": {"client_bin": os.path.join(BIN, "aaa-peer-fin")},
    "fin1": {"client_env": {"AAATP_FIN": "1"}, "client_bin": os.path.join(BIN, "aaa-peer-fin")},
    "fin2": {"client_env": {"AAATP_FIN": "2"}, "client_bin": os.path.join(BIN, "aaa-peer-fin")},
    "fin2guard": {"client_env": {"AAATP_FIN": "2"}, "client_bin": os.path.join(BIN, "aaa-peer-fin"), "server_args": ["--inline-handler-time", "10s"]},
    "spin30": {"client_env": {"AAATP_SPIN": "30us"}, "client_bin": os.path.join(BIN, "aaa-peer-fin")},
    "spin30fin2": {"client_env": {"AAATP_SPIN": "30us", "AAATP_FIN": "2"}, "client_bin": os.path.join(BIN, "aaa-peer-fin")},
    "baton": {"client_env": {"AAATP_BATON": "1"}, "client_bin": os.path.join(BIN, "aaa-peer-baton")},
    "batonguard": {"client_env": {"AAATP_BATON": "1"}, "client_bin": os.path.join(BIN, "aaa-peer-baton"), "server_args": ["--inline-handler-time", "10s"]},
    "batonoff": {"client_bin": os.path.join(BIN, "aaa-peer-baton")},
    "gc": {"client_env": {"GOGC": "off"}, "server_env": {"GOGC": "off"}},
    "old": {"client_bin": os.path.join(BIN, "aaa-peer-old"), "server_bin": os.path.join(BIN, "aaa-peer-old")},
    "oldc": {"client_bin": os.path.join(BIN, "aaa-peer-old")},
    "olds": {"server_bin": os.path.join(BIN, "aaa-peer-old")},
    "oldsguard": {"server_bin": os.path.join(BIN, "aaa-peer-old"), "server_args": ["--inline-handler-time", "10s"]},
}
V = {}


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def start_server(kind, d, tag):
    v = V
    if kind in ("rawinline", "godiameter", "raw"):
        env = dict(xenv("RAW_SERVER_ENV"), AAATP_BENCH_ROLE="server " + kind, **v.get("server_env", {}))
        p = subprocess.Popen([BENCH], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = p.stdout.readline().strip()
        assert line.startswith("ADDR "), line
        return p, line[5:], lambda: p.stdin.close()
    assert kind == "aaa-peer"
    ready = os.path.join(d, "ready")
    args = [v.get("server_bin", AAA), "server", "--listen", "tcp://127.0.0.1:0", "--origin-host",
            "server.example.net", "--origin-realm", "example.net", "--ready", ready,
            "--log-level", "error"] + v.get("server_args", [])
    if PROF:
        args += ["--cpuprofile", os.path.join(PROF, tag + "-server.pprof")]
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(xenv("AAA_SERVER_ENV"), **v.get("server_env", {})))
    for _ in range(1000):
        try:
            s = open(ready).read()
            if s.endswith("\n"):
                return p, s.split("\n")[0].strip().removeprefix("tcp://"), lambda: p.terminate()
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError("aaa-peer server not ready")


def run_client(kind, addr, dur, d, tag):
    if kind in ("pingpong", "godiameter"):
        env = dict(xenv("RAW_CLIENT_ENV"), AAATP_BENCH_ROLE=f"client {kind} {addr} 1 {dur}", **V.get("client_env", {}))
        out = subprocess.run([BENCH], env=env, capture_output=True, text=True, check=True).stdout
        n = 0
        for l in out.splitlines():
            if l.startswith("LAT "):
                _, p50, p99, n = l.split()
                return float(p50), float(p99), int(n)
        raise RuntimeError(out)
    rep = os.path.join(d, "report.json")
    args = [V.get("client_bin", AAA), "client", "--peer", "tcp://" + addr, "--origin-host", "client.example.net",
            "--origin-realm", "example.net", "--destination-realm", "example.net",
            "--concurrency", "1", "--duration", dur, "--app", "acct", "--report", rep,
            "--log-level", "error"]
    if PROF:
        args += ["--cpuprofile", os.path.join(PROF, tag + "-client.pprof")]
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=dict(xenv("AAA_CLIENT_ENV"), **V.get("client_env", {})))
    r = json.load(open(rep))
    return float(r["latency_us"]["p50"]), float(r["latency_us"]["p99"]), int(r["answered"])


def main():
    rounds, dur, pairs = int(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
    res = {p: [] for p in pairs}
    for r in range(rounds):
        # rotate the order so that no pair always runs first
        order = pairs[r % len(pairs):] + pairs[:r % len(pairs)]
        for pair in order:
            cs, _, var = pair.partition(":")
            c, s = cs.split("+")
            V.clear()
            V.update(VARIANTS[var])
            with tempfile.TemporaryDirectory() as d:
                tag = f"r{r}-{c}-{s}"
                l0 = load()
                srv, addr, stop = start_server(s, d, tag)
                try:
                    p50, p99, n = run_client(c, addr, dur, d, tag)
                finally:
                    stop()
                    srv.wait(timeout=20)
                res[pair].append((p50, p99, n))
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} round {r+1} {pair:24s} p50 {p50:6.1f} p99 {p99:7.1f} n {n:7d} rps {n/float(dur.rstrip('s')):8.0f} load {l0}", flush=True)
    print("\nsummary (median, min-max over %d rounds)" % rounds)
    base = res.get("pingpong+rawinline")
    for pair, v in res.items():
        p50 = [x[0] for x in v]
        p99 = [x[1] for x in v]
        line = f"{pair:24s} p50 {statistics.median(p50):6.1f} ({min(p50):.1f}-{max(p50):.1f})  p99 {statistics.median(p99):7.1f} ({min(p99):.1f}-{max(p99):.1f})"
        if base and pair != "pingpong+rawinline":
            ratios = [a[0] / b[0] for a, b in zip(v, base)]
            line += f"  p50/pingpong round by round {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        print(line, flush=True)


main()
