package client

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/aaatp/aaatp/internal/call"
	"github.com/aaatp/aaatp/loadbalance"
)

// balanceKeys copies both keys (the balancer may keep them: they must not
// alias the request), empty ones included.
func TestBalanceKeys(t *testing.T) {
	nai, sid := []byte("user@example.net"), []byte("c1.example.net;1;2")
	r := balanceKeys(call.Key{NAI: nai, SessionID: sid})
	assert.Equal(t, loadbalance.Request{NAI: "user@example.net", SessionID: "c1.example.net;1;2"}, r)
	nai[0], sid[0] = 'X', 'X'
	assert.Equal(t, loadbalance.Request{NAI: "user@example.net", SessionID: "c1.example.net;1;2"}, r, "a copy, not the request's bytes")
	assert.Equal(t, loadbalance.Request{SessionID: "s"}, balanceKeys(call.Key{SessionID: []byte("s")}))
	assert.Equal(t, loadbalance.Request{NAI: "n"}, balanceKeys(call.Key{NAI: []byte("n")}))
	assert.Equal(t, loadbalance.Request{}, balanceKeys(call.Key{}))
}
