package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// The --events lines keep their field names and carry each kind's fields.
func TestEventLines(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	cases := []struct {
		name string
		line eventLine
		want string
	}{
		{"watchdog", peerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventWatchdog, From: watchdog.Reopen, To: watchdog.Okay,
			Trigger: watchdog.ReceiveDWA, NumDWA: 3, Reason: "third DWA"}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"s1","type":"watchdog","kind":"watchdog","from":"REOPEN","to":"OKAY","reason":"third DWA","trigger":"` + watchdog.ReceiveDWA.String() + `","num_dwa":3}`},
		{"down->reopen counts zero DWAs", peerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventWatchdog, From: watchdog.Down, To: watchdog.Reopen,
			Trigger: watchdog.ConnectionUp}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"s1","type":"watchdog","kind":"watchdog","from":"DOWN","to":"REOPEN","reason":"","trigger":"` + watchdog.ConnectionUp.String() + `","num_dwa":0}`},
		{"connection down", peerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventConnDown, DPR: true, DPA: true, Reason: "closed after DPA"}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"s1","type":"connection","kind":"connection_down","reason":"closed after DPA","dpr":true,"dpa":true}`},
		{"client's peer event is the peer's line", clientLine(client.Event{Time: at, Server: "a", Kind: client.EventPeer,
			Peer: &peer.Event{Time: at, Peer: "s1", Kind: peer.EventConnUp, Network: "tcp", Addr: "127.0.0.1:3868", Reason: "up"}}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"s1","type":"connection","kind":"connection_up","reason":"up","network":"tcp","addr":"127.0.0.1:3868"}`},
		{"failover record", clientLine(client.Event{Time: at, Server: "a", Kind: client.EventFailover, Reason: "r",
			Failover: &client.FailoverRecord{Time: at, From: "a", To: "b", Outcome: client.Moved, Reason: "r", Moved: 2, EndToEnd: []uint32{7, 8}}}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"a","type":"failover","kind":"failover","reason":"r","from_peer":"a","to_peer":"b","moved":2,"end_to_end":[7,8],"outcome":"moved"}`},
		{"balancer", clientLine(client.Event{Time: at, Server: "a", Kind: client.EventBalancerRebuilt, Generation: 4, Reason: "g"}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"a","type":"balancer","kind":"balancer_rebuilt","reason":"g","generation":4}`},
		{"queue", clientLine(client.Event{Time: at, Server: "a", Kind: client.EventQueueAlarm, Raised: true, Depth: 10, Reason: "q"}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"a","type":"queue","kind":"queue_alarm","reason":"q","raised":true,"depth":10}`},
		{"slot", clientLine(client.Event{Time: at, Server: "c", Kind: client.EventSlotFilled, Because: "a", Reason: "s"}),
			`{"time":"2025-01-02T03:04:05.000000006Z","peer":"c","type":"connection","kind":"slot_filled","reason":"s","because":"a"}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}
