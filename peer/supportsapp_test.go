package peer

import (
	"slices"
	"testing"

	"github.com/aaatp/aaatp/message"
)

// supportsAppReference is supportsApp over the list of allApps, as it was.
func supportsAppReference(c *Config, app uint32) bool {
	apps := c.allApps()
	return slices.Contains(apps, app) || slices.Contains(apps, message.AppRelay)
}

// TestSupportsAppMatchesAllApps: supportsApp answers as a search of
// allApps for the application or Relay would, for auth, accounting and
// vendor-specific applications, Relay, and applications not advertised.
func TestSupportsAppMatchesAllApps(t *testing.T) {
	configs := []Config{
		{},
		{AcctApps: []uint32{message.AppAccounting}},
		{AuthApps: []uint32{4, 5}, AcctApps: []uint32{3}},
		{VendorApps: []VendorApp{{VendorID: message.VendorTest, AuthAppID: message.AppTest}}},
		{VendorApps: []VendorApp{{VendorID: 10415, AcctAppID: 16777216}}, AuthApps: []uint32{1}},
		{AuthApps: []uint32{message.AppRelay}},
		{VendorApps: []VendorApp{{VendorID: 1, AuthAppID: message.AppRelay}}},
	}
	apps := []uint32{0, 1, 3, 4, 5, 6, message.AppTest, 16777216, message.AppRelay, 12345}
	for i := range configs {
		c := &configs[i]
		for _, app := range apps {
			if got, want := c.supportsApp(app), supportsAppReference(c, app); got != want {
				t.Errorf("config %d, app %d: supportsApp %v, allApps says %v", i, app, got, want)
			}
		}
	}
}

// BenchmarkSupportsApp: the per-request application check, without the
// list (new) and over allApps (reference), side by side.
func BenchmarkSupportsApp(b *testing.B) {
	c := &Config{AcctApps: []uint32{message.AppAccounting},
		VendorApps: []VendorApp{{VendorID: message.VendorTest, AuthAppID: message.AppTest}}}
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.supportsApp(message.AppTest)
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = supportsAppReference(c, message.AppTest)
		}
	})
}
