package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrefixList(t *testing.T) {
	var l prefixList
	require.NoError(t, l.Set("10.1.2.3"))
	require.NoError(t, l.Set("192.168.7.9/16"))
	require.NoError(t, l.Set("2001:db8::/32"))
	assert.Equal(t, "10.1.2.3/32,192.168.0.0/16,2001:db8::/32", l.String())
	err := l.Set("proxy.example.net")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "neither an IP address nor a prefix")
}
