package client

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/loadbalance"
)

// balanceKeys gives the balancer both keys, empty ones included, without
// allocating: the strings are views of the request's bytes (Pick copies
// what it remembers; loadbalance's TestRememberedSessionIDIsCopied).
func TestBalanceKeys(t *testing.T) {
	nai, sid := []byte("user@example.net"), []byte("c1.example.net;1;2")
	r := balanceKeys(call.Key{NAI: nai, SessionID: sid})
	assert.Equal(t, loadbalance.Request{NAI: "user@example.net", SessionID: "c1.example.net;1;2"}, r)
	assert.Equal(t, loadbalance.Request{SessionID: "s"}, balanceKeys(call.Key{SessionID: []byte("s")}))
	assert.Equal(t, loadbalance.Request{NAI: "n"}, balanceKeys(call.Key{NAI: []byte("n")}))
	assert.Equal(t, loadbalance.Request{}, balanceKeys(call.Key{}))
	k := call.Key{NAI: nai, SessionID: sid}
	var sink loadbalance.Request
	assert.Zero(t, testing.AllocsPerRun(100, func() { sink = balanceKeys(k) }))
	_ = sink
}
