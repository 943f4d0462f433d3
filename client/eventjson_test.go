package client

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/watchdog"
)

// The event lines keep their field names, carry each kind's fields and
// decode back.
func TestEventLines(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	const ts = `{"time":"2025-01-02T03:04:05.000000006Z",`
	cases := []struct {
		name string
		line EventLine
		want string
	}{
		{"watchdog", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventWatchdog, From: watchdog.Reopen, To: watchdog.Okay,
			Trigger: watchdog.ReceiveDWA, NumDWA: 3, Reason: "third DWA"}),
			ts + `"peer":"s1","type":"watchdog","kind":"watchdog","from":"REOPEN","to":"OKAY","reason":"third DWA","trigger":"` + watchdog.ReceiveDWA.String() + `","num_dwa":3}`},
		{"down->reopen counts zero DWAs", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventWatchdog, From: watchdog.Down, To: watchdog.Reopen,
			Trigger: watchdog.ConnectionUp}),
			ts + `"peer":"s1","type":"watchdog","kind":"watchdog","from":"DOWN","to":"REOPEN","reason":"","trigger":"` + watchdog.ConnectionUp.String() + `","num_dwa":0}`},
		{"connection down", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventConnDown, DPR: true, DPA: true, Reason: "closed after DPA"}),
			ts + `"peer":"s1","type":"connection","kind":"connection_down","reason":"closed after DPA","dpr":true,"dpa":true}`},
		{"a server's failover", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventFailover, Pending: 4, Reason: "f"}),
			ts + `"peer":"s1","type":"failover","kind":"failover","reason":"f","pending":4}`},
		{"late refusal", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventLateRefusal, ResultCode: 3004, Reason: "l"}),
			ts + `"peer":"s1","type":"failover","kind":"late_refusal","reason":"l","result_code":3004}`},
		{"the peer's DPR", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventDisconnecting, Reason: "d"}),
			ts + `"peer":"s1","type":"connection","kind":"disconnecting","reason":"d"}`},
		{"open failed", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventOpenFailed, ResultCode: 3010, Reason: "o"}),
			ts + `"peer":"s1","type":"connection","kind":"open_failed","reason":"o","result_code":3010}`},
		{"error", PeerLine(peer.Event{Time: at, Peer: "s1", Kind: peer.EventError, Reason: "e"}),
			ts + `"peer":"s1","type":"error","kind":"error","reason":"e"}`},
		{"client's peer event is the peer's line", Event{Time: at, Server: "a", Kind: EventPeer,
			Peer: &peer.Event{Time: at, Peer: "s1", Kind: peer.EventConnUp, Network: "tcp", Addr: "127.0.0.1:3868", Reason: "up"}}.Line(),
			ts + `"peer":"s1","type":"connection","kind":"connection_up","reason":"up","network":"tcp","addr":"127.0.0.1:3868"}`},
		{"failover record", Event{Time: at, Server: "a", Kind: EventFailover, Reason: "r",
			Failover: &FailoverRecord{Time: at, From: "a", To: "b", Outcome: Moved, Reason: "r", Moved: 2, EndToEnd: []uint32{7, 8}}}.Line(),
			ts + `"peer":"a","type":"failover","kind":"failover","reason":"r","from_peer":"a","to_peer":"b","moved":2,"end_to_end":[7,8],"outcome":"moved"}`},
		{"balancer", Event{Time: at, Server: "a", Kind: EventBalancerRebuilt, Generation: 4, Reason: "g"}.Line(),
			ts + `"peer":"a","type":"balancer","kind":"balancer_rebuilt","reason":"g","generation":4}`},
		{"policy", Event{Time: at, Server: "a", Kind: EventPolicy, Policy: &policy.Event{From: policy.InService, To: policy.OutOfService}, Reason: "p"}.Line(),
			ts + `"peer":"a","type":"policy","kind":"policy","from":"` + policy.InService.String() + `","to":"` + policy.OutOfService.String() + `","reason":"p"}`},
		{"queue", Event{Time: at, Server: "a", Kind: EventQueueAlarm, Raised: true, Depth: 10, Reason: "q"}.Line(),
			ts + `"peer":"a","type":"queue","kind":"queue_alarm","reason":"q","raised":true,"depth":10}`},
		{"slot", Event{Time: at, Server: "c", Kind: EventSlotFilled, Because: "a", Reason: "s"}.Line(),
			ts + `"peer":"c","type":"connection","kind":"slot_filled","reason":"s","because":"a"}`},
		{"slot released", Event{Time: at, Server: "c", Kind: EventSlotReleased, Reason: "s"}.Line(),
			ts + `"peer":"c","type":"connection","kind":"slot_released","reason":"s"}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
		var back EventLine
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if again, _ := json.Marshal(back); string(again) != tc.want {
			t.Errorf("%s decoded and encoded again:\n got %s\nwant %s", tc.name, again, tc.want)
		}
	}
}
