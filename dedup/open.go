package dedup

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aaatp/aaatp/internal/storeurl"
)

// Open returns a Store from a URL: "memory" for NewMemory, or a Redis URL
// for NewRedis with a client that Close closes. opts apply to the store.
// Redis URLs are parsed by go-redis (redis.ParseURL, ParseFailoverURL,
// ParseClusterURL), whose query parameters (dial_timeout, pool_size...)
// they accept; "rediss" instead of "redis" means TLS. The client honours
// context deadlines on the wire (go-redis' ContextTimeoutEnabled), unless
// a Sentinel URL sets context_timeout_enabled=false:
//
//   - one server: redis://[user:password@]host:port/db
//   - Sentinel: redis://[user:password@]sentinel1:port/db?master_name=NAME&addr=sentinel2:port&addr=...
//     (the userinfo authenticates to the sentinels, the username and
//     password parameters to the master), or the same with the scheme
//     redis+sentinel; the store waits for one replica to acknowledge
//     each write (see WithReplicaAcks; opts may change it)
//   - Cluster: redis+cluster://[user:password@]node1:port?addr=node2:port&addr=...,
//     or redis:// with addr parameters and no master_name (several
//     addresses and no master name mean a cluster, as for go-redis'
//     UniversalClient)
func Open(rawURL string, opts ...Option) (Store, error) {
	if rawURL == "memory" || rawURL == "memory:" {
		return NewMemory(opts...), nil
	}
	client, kind, err := redisClient(rawURL)
	if err != nil {
		return nil, err
	}
	if kind == redisSentinel {
		opts = append([]Option{WithReplicaAcks(1, 250*time.Millisecond)}, opts...)
	}
	r := NewRedis(client, opts...)
	r.owned = true
	return r, nil
}

// Kinds of Redis deployment a URL names.
const (
	redisSingle = iota
	redisSentinel
	redisCluster
)

// redisClient parses a Redis URL (see Open) and returns its client.
func redisClient(rawURL string) (redis.UniversalClient, int, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	base, mode, _ := strings.Cut(scheme, "+")
	if !ok || (base != "redis" && base != "rediss") || (mode != "" && mode != "sentinel" && mode != "cluster") {
		// Not the whole input: it may hold a password, after a ':' or
		// an '@' (without "://", scheme is the whole input).
		shown := scheme
		if i := strings.IndexAny(shown, ":@"); i >= 0 {
			shown = shown[:i] + "..."
		}
		return nil, 0, fmt.Errorf("dedup: unknown store %q (want \"memory\", redis://host:port/db, redis+sentinel://... or redis+cluster://...)", shown)
	}
	goURL := base + "://" + rest // go-redis' parsers know redis and rediss
	u, err := url.Parse(goURL)
	if err != nil {
		return nil, 0, fmt.Errorf("dedup: bad Redis URL: %w", redactErr(err))
	}
	if storeurl.StrayAt(u) {
		// go-redis' errors would quote the path or query, and what is
		// left of the password with it.
		return nil, 0, fmt.Errorf("dedup: bad Redis URL %s: an '@' after its host (a password whose '/' or '?' is not escaped?)", storeurl.Redacted(rawURL))
	}
	if mode == "" {
		q := u.Query()
		switch {
		case q.Has("master_name"):
			mode = "sentinel"
		case q.Has("addr"):
			mode = "cluster"
		}
	}
	switch mode {
	case "sentinel":
		o, err := redis.ParseFailoverURL(goURL)
		if err != nil {
			return nil, 0, fmt.Errorf("dedup: Sentinel URL: %w", redactErr(err))
		}
		if o.MasterName == "" {
			return nil, 0, fmt.Errorf("dedup: Sentinel URL without master_name")
		}
		if u, err := url.Parse(goURL); err == nil && !u.Query().Has("context_timeout_enabled") {
			o.ContextTimeoutEnabled = true // see below
		}
		return redis.NewFailoverClient(o), redisSentinel, nil
	case "cluster":
		o, err := redis.ParseClusterURL(goURL)
		if err != nil {
			return nil, 0, fmt.Errorf("dedup: Cluster URL: %w", redactErr(err))
		}
		o.ContextTimeoutEnabled = true // see below
		return redis.NewClusterClient(o), redisCluster, nil
	}
	o, err := redis.ParseURL(goURL)
	if err != nil {
		return nil, 0, fmt.Errorf("dedup: %w", redactErr(err))
	}
	// A command on the wire ends at its context's deadline, not only at
	// the socket's read timeout (seconds): a Redis that hangs would
	// otherwise hold each request past its own deadline, and Complete and
	// Abandon past the mark TTL. (Of go-redis' URL parsers, only the
	// Sentinel one reads context_timeout_enabled; a Sentinel URL setting
	// it is followed.)
	o.ContextTimeoutEnabled = true
	return redis.NewClient(o), redisSingle, nil
}

// redactErr keeps a URL's password out of a parse error: the URL goes,
// and so does what the error quotes of it (url.Parse quotes the part it
// refuses: `invalid port ":pa" after host` for a password "pa#ss" written
// unescaped, `invalid URL escape "%zz"`).
func redactErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return fmt.Errorf("%s: %s", ue.Op, storeurl.Unquoted(ue.Err.Error()))
	}
	return err
}
