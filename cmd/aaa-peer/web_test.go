package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/status"
)

// Helpers of the tests that read a node's --status server.

// httpc is the tests' HTTP client: no keep-alive, so that no idle
// connection goroutine outlives a test (goleak).
var httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := httpc.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", u, resp.Status, err, b)
	}
	return string(b)
}

func getSnapshot(u string) (status.Snapshot, error) {
	var s status.Snapshot
	resp, err := httpc.Get(u + "status.json")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("status.json: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// peerState returns the state of the peer named name in the node's
// /status.json, "" if absent.
func peerState(u, name string) string {
	s, err := getSnapshot(u)
	if err != nil {
		return ""
	}
	for _, p := range s.Peers {
		if p.Peer == name {
			return p.State
		}
	}
	return ""
}

// waitState waits until peerState(u, name) is want.
func waitState(t *testing.T, u, name, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := peerState(u, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: peer %s is %q after %v, want %s", u, name, got, within, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitURL waits until a log line in buf gives the status page's URL.
func waitURL(t *testing.T, buf *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(buf.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status page URL logged after 10s:\n%s", buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricValue returns the value of the sample of name with exactly these
// labels in a Prometheus text exposition, and whether it is there.
func metricValue(text, name string, labels map[string]string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		var ls, val string
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			if ls, val, ok = strings.Cut(rest, "} "); !ok {
				continue
			}
		} else if rest, ok := strings.CutPrefix(line, name+" "); ok {
			val = rest
		} else {
			continue
		}
		got := map[string]string{}
		for _, kv := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(ls, -1) {
			got[kv[1]] = kv[2]
		}
		match := len(got) == len(labels)
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
