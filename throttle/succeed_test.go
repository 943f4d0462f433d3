package throttle

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server that replaces another at the same remote counts the
// requests still outstanding there: the remote never carries more than
// the successor's limit, and each place the old one frees lets one more
// go to the new one, also across a second replacement.
func TestSucceedCarriesTheOutstanding(t *testing.T) {
	target := 0
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 2}}},
		Pick:    func(*item, Class) (int, bool) { return target, true },
	})
	for i := range 6 {
		s.Enqueue(&item{id: i}, Auth)
	}
	require.Len(t, s.Poll(at(0), nil), 2, "a's two places")

	b, err := s.AddServer(Server{Name: "a", Auth: Limits{MaxOutstanding: 2}})
	require.NoError(t, err)
	s.Succeed(0, b, at(0))
	target = b
	assert.Empty(t, s.Poll(at(ms), nil), "a's two requests outstanding count at b")
	assert.Equal(t, 2, s.Outstanding(b, Auth))

	s.Done(0, Auth) // one of a's is answered
	assert.Len(t, s.Poll(at(2*ms), nil), 1, "its place goes to b")
	assert.Equal(t, 2, s.Outstanding(b, Auth))

	c, err := s.AddServer(Server{Name: "a", Auth: Limits{MaxOutstanding: 2}})
	require.NoError(t, err)
	s.Succeed(b, c, at(3*ms))
	target = c
	assert.Empty(t, s.Poll(at(4*ms), nil), "a's last and b's one count at c")
	s.Done(0, Auth) // a's last: freed at b and c
	assert.Equal(t, 0, s.Outstanding(0, Auth))
	assert.Equal(t, 1, s.Outstanding(b, Auth))
	assert.Len(t, s.Poll(at(5*ms), nil), 1)
	s.Done(b, Auth)
	assert.Len(t, s.Poll(at(6*ms), nil), 1)
	assert.Equal(t, 2, s.Outstanding(c, Auth))

	s.Succeed(c, 0, at(7*ms)) // not a successor: ignored, no cycle
	s.Done(c, Auth)
	assert.Equal(t, 1, s.Outstanding(c, Auth))
}
