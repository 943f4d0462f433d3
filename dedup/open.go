package dedup

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Open returns a Store from a URL: "memory" for NewMemory, or a Redis URL
// ("redis://[user:password@]host:port/db", "rediss://..." for TLS) for
// NewRedis with a client that Close closes. opts apply to the store.
func Open(url string, opts ...Option) (Store, error) {
	switch {
	case url == "memory" || url == "memory:":
		return NewMemory(opts...), nil
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"):
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		r := NewRedis(redis.NewClient(o), opts...)
		r.owned = true
		return r, nil
	}
	scheme, _, _ := strings.Cut(url, ":") // not the whole URL: it may hold a password
	return nil, fmt.Errorf("dedup: unknown store %q (want \"memory\" or \"redis://host:port/db\")", scheme)
}
