package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDedupSentinelPasswords: a [dedup] Sentinel URL (master_name, or
// the redis+sentinel scheme) with password-file or password-env opens
// the store with that password for the master (go-redis gives the master
// the password parameter, the sentinels the userinfo), and
// sentinel-password-file or -env gives the sentinels theirs. The result
// is parsed as dedup.Open parses it, with redis.ParseFailoverURL.
func TestDedupSentinelPasswords(t *testing.T) {
	d := t.TempDir()
	const masterPW, sentinelPW = "m#1/p%w&x=y+ ü", "s3nt:@/?#"
	for name, body := range map[string]string{"master.pw": masterPW + "\n", "sentinel.pw": sentinelPW + "\r\n"} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AAATP_TEST_MASTER_PW", masterPW)
	t.Setenv("AAATP_TEST_SENTINEL_PW", sentinelPW)
	for _, tc := range []struct {
		name, src                                  string
		master, sentinel, masterUser, sentinelUser string
		sentinels                                  int
	}{
		{"the review's case: master_name, password-file",
			`url = "redis://10.0.0.1:26379/0?master_name=mymaster&addr=10.0.0.2:26379"` + "\npassword-file = \"master.pw\"\n",
			masterPW, "", "", "", 2},
		{"password-env",
			`url = "redis://10.0.0.1:26379/0?master_name=mymaster"` + "\npassword-env = \"AAATP_TEST_MASTER_PW\"\n",
			masterPW, "", "", "", 1},
		{"sentinels with their own password",
			`url = "redis://10.0.0.1:26379/0?master_name=mymaster&addr=10.0.0.2:26379"` + "\npassword-file = \"master.pw\"\nsentinel-password-file = \"sentinel.pw\"\n",
			masterPW, sentinelPW, "", "", 2},
		{"sentinels alone with a password, from the environment",
			`url = "redis://10.0.0.1:26379/0?master_name=mymaster"` + "\nsentinel-password-env = \"AAATP_TEST_SENTINEL_PW\"\n",
			"", sentinelPW, "", "", 1},
		{"ACL users: the master's as the username parameter, the sentinels' in the userinfo",
			`url = "redis://sen@10.0.0.1:26379/0?master_name=mymaster&username=app"` + "\npassword-file = \"master.pw\"\nsentinel-password-file = \"sentinel.pw\"\n",
			masterPW, sentinelPW, "app", "sen", 1},
		{"the redis+sentinel scheme",
			`url = "redis+sentinel://10.0.0.1:26379/0?master_name=mymaster"` + "\npassword-file = \"master.pw\"\n",
			masterPW, "", "", "", 1},
		{"the same file for both",
			`url = "rediss+sentinel://10.0.0.1:26379/0?master_name=mymaster"` + "\npassword-file = \"master.pw\"\nsentinel-password-file = \"master.pw\"\n",
			masterPW, masterPW, "", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(filepath.Join(d, "s.toml"), []byte("[dedup]\n"+tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.Dedup.Sentinel() {
				t.Errorf("%s: not a Sentinel URL", cfg.Dedup.URL)
			}
			u := cfg.Dedup.URLWithPassword()
			// dedup.Open gives go-redis redis:// or rediss:// (the mode
			// after '+' is its own).
			scheme, rest, _ := strings.Cut(u, "://")
			base, _, _ := strings.Cut(scheme, "+")
			o, err := redis.ParseFailoverURL(base + "://" + rest)
			if err != nil {
				t.Fatalf("ParseFailoverURL: %v", err)
			}
			if o.MasterName != "mymaster" || o.Password != tc.master || o.SentinelPassword != tc.sentinel ||
				o.Username != tc.masterUser || o.SentinelUsername != tc.sentinelUser || len(o.SentinelAddrs) != tc.sentinels || o.DB != 0 {
				t.Errorf("master %q, password %q, username %q; sentinels %v, password %q, username %q; db %d\nwant password %q, username %q; %d sentinels, password %q, username %q",
					o.MasterName, o.Password, o.Username, o.SentinelAddrs, o.SentinelPassword, o.SentinelUsername, o.DB,
					tc.master, tc.masterUser, tc.sentinels, tc.sentinel, tc.sentinelUser)
			}
			if strings.Contains(cfg.Dedup.URL, "m#1") || strings.Contains(cfg.Summary(), "m#1") || strings.Contains(cfg.Summary(), "s3nt") {
				t.Errorf("the printable URL holds a password: %s", cfg.Summary())
			}
		})
	}

	// A URL of one server, or of a cluster, keeps its password in the
	// userinfo, where go-redis gives it to the servers.
	for _, tc := range []struct{ url, user string }{
		{"redis://aaa@10.0.0.1:6379/0", "aaa"},
		{"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000", ""},
	} {
		cfg, err := Parse(filepath.Join(d, "s.toml"), []byte("[dedup]\nurl = \""+tc.url+"\"\npassword-file = \"master.pw\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		u := cfg.Dedup.URLWithPassword()
		var user, pw string
		if strings.HasPrefix(u, "redis+cluster://") {
			o, err := redis.ParseClusterURL("redis://" + strings.TrimPrefix(u, "redis+cluster://"))
			if err != nil {
				t.Fatal(err)
			}
			user, pw = o.Username, o.Password
		} else {
			o, err := redis.ParseURL(u)
			if err != nil {
				t.Fatal(err)
			}
			user, pw = o.Username, o.Password
		}
		if cfg.Dedup.Sentinel() || user != tc.user || pw != masterPW {
			t.Errorf("%s: username %q, password %q (Sentinel %v)", tc.url, user, pw, cfg.Dedup.Sentinel())
		}
	}
}

// TestDedupSentinelPasswordProblems: the sentinels' password keys are
// checked as the master's are, and a Sentinel URL's user name without
// the sentinels' password (meant for the master, most likely) is
// refused; no problem shows a password of the URL, even one that makes
// it fail to parse.
func TestDedupSentinelPasswordProblems(t *testing.T) {
	d := dir(t)
	t.Setenv("AAATP_TEST_SET", "x")
	const sentinel = `url = "redis://s1:26379/0?master_name=m"` + "\n"
	for _, tc := range []struct {
		name, src string
		line      int
		key, msg  string
	}{
		{"sentinel password of one server", `url = "redis://r:6379/0"` + "\nsentinel-password-file = \"redis.pw\"\n", 3, "dedup.sentinel-password-file",
			"the URL names no Sentinel master (master_name): give the store's password as password-file or password-env"},
		{"sentinel password of a cluster", `url = "redis+cluster://r:7000"` + "\nsentinel-password-env = \"AAATP_TEST_SET\"\n", 3, "dedup.sentinel-password-env",
			"the URL names no Sentinel master"},
		{"sentinel password of memory", "sentinel-password-env = \"AAATP_TEST_SET\"\n", 2, "dedup.sentinel-password-env", "the memory store has no password"},
		{"sentinel password file and env", sentinel + "sentinel-password-file = \"redis.pw\"\nsentinel-password-env = \"AAATP_TEST_SET\"\n", 4, "dedup.sentinel-password-env",
			"give sentinel-password-file or sentinel-password-env, not both"},
		{"sentinel password file missing", sentinel + "sentinel-password-file = \"nope\"\n", 3, "dedup.sentinel-password-file", "{dir}/nope: no such file"},
		{"sentinel password file empty", sentinel + "sentinel-password-file = \"empty\"\n", 3, "dedup.sentinel-password-file", "{dir}/empty is empty"},
		{"sentinel password env unset", sentinel + "sentinel-password-env = \"AAATP_TEST_UNSET\"\n", 3, "dedup.sentinel-password-env",
			"the environment variable AAATP_TEST_UNSET is not set"},
		{"sentinel password env not a name", sentinel + "sentinel-password-env = \"$PW\"\n", 3, "dedup.sentinel-password-env", `"$PW" is not an environment variable name`},
		{"sentinel password not a string", sentinel + "sentinel-password-file = 3\n", 3, "dedup.sentinel-password-file", "3: want a string"},
		{"a Sentinel URL's user name without the sentinels' password", `url = "redis://app@s1:26379/0?master_name=m"` + "\npassword-file = \"redis.pw\"\n", 2, "dedup.url",
			"the user name of a Sentinel URL is the sentinels'"},
		{"redis+sentinel without master_name", `url = "redis+sentinel://s1:26379/0"` + "\n", 2, "dedup.url",
			`"redis+sentinel://s1:26379/0": a Sentinel URL names its master: add master_name=NAME`},
		{"a master password in the query", `url = "redis://s1:26379/0?master_name=m&Password=pw"` + "\n", 2, "dedup.url",
			`"redis://s1:26379/0?Password=xxxxx&master_name=m" holds a password in its query: leave it out and give password-file or password-env (the master's), sentinel-password-file or sentinel-password-env (the sentinels')`},
		{"a query that does not parse", `url = "redis://s1:26379/0?master_name=m&password=p%zz"` + "\n", 2, "dedup.url",
			`"redis://s1:26379/0?...": its query does not parse: invalid URL escape "..."`},
		{"a password with a '#' in the userinfo", `url = "redis://:pa#ss@r:6379/0"` + "\n", 2, "dedup.url",
			`"redis://..." is not a URL: invalid port "..." after host`},
		{"a password with a '%' in the userinfo", `url = "redis://:p%zzss@r:6379/0"` + "\n", 2, "dedup.url",
			`"redis://..." is not a URL: invalid URL escape "..."`},
		{"a password whose '/' ends the host before it", `url = "redis://:2024/Xq7v@10.0.0.5:6379/0"` + "\n", 2, "dedup.url",
			`"redis://..." holds an '@' after its host: a password written in it, whose '/' or '?' ends the host? Leave it out and give password-file or password-env`},
		{"a password whose '?' ends the host before it", `url = "redis://:2024?Xq7v@10.0.0.5:6379/0"` + "\n", 2, "dedup.url",
			`"redis://..." holds an '@' after its host`},
		{"a password in a URL of another scheme", `url = "mysql://u:pw@db:3306"` + "\n", 2, "dedup.url",
			`"mysql://u:xxxxx@db:3306": want memory or a redis://`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(d, "t.toml"), []byte("[dedup]\n"+tc.src))
			msg := strings.ReplaceAll(tc.msg, "{dir}", d)
			checkProblems(t, err, []Problem{{File: filepath.Join(d, "t.toml"), Line: tc.line, Key: tc.key, Msg: msg}})
			if err != nil {
				for _, secret := range []string{":pw", "=pw", "p%zz", "pa#", "#ss"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("the problem shows a password (%q): %v", secret, err)
					}
				}
			}
		})
	}
}
