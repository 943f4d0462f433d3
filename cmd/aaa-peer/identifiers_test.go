package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/radpeer"
)

// A max-outstanding in a file of RADIUS servers above their Identifiers
// is refused by config check with its line; the bounds config keeps are
// radpeer's.
func TestConfigMaxOutstandingIdentifiersAreRadpeers(t *testing.T) {
	for _, tc := range []struct {
		url  string
		most int
	}{
		{"radius://10.0.0.1:1812", radpeer.IDsPerSocket * radpeer.DefaultUDPSockets},
		{"radius+tcp://10.0.0.1:1812", radpeer.IDsPerConn * radpeer.MaxConnsLimit},
	} {
		for _, n := range []int{tc.most, tc.most + 1} {
			_, err := config.Parse("r.toml", []byte("secret = \"s\"\nmax-outstanding = "+strconv.Itoa(n)+"\n[[peer]]\nurl = \""+tc.url+"\"\n"))
			if n == tc.most {
				assert.NoError(t, err, tc.url)
			} else if assert.Error(t, err, tc.url) {
				assert.True(t, strings.HasPrefix(err.Error(), "r.toml:2: max-outstanding: "+strconv.Itoa(n)+": "), err.Error())
			}
		}
	}
}
