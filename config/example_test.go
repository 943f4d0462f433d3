package config_test

import (
	"fmt"

	"github.com/aaatp/aaatp/config"
)

// A client of ten weighted Diameter peers, the file that replaces a long
// command line of --peer and --weight flags.
func Example() {
	const file = `# aaa-peer client --config client.toml
origin-host = "client1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
tw = "30s"
max-outstanding = 256        # every peer's, unless it sets its own

[[peer]]
name = "hss01"
url = "tcp://10.0.1.1:3868"
weight = 4
[[peer]]
name = "hss02"
url = "tcp://10.0.1.2:3868"
weight = 4
[[peer]]
name = "hss03"
url = "tcp://10.0.1.3:3868"
weight = 2
[[peer]]
name = "hss04"
url = "tcp://10.0.1.4:3868"
weight = 2
[[peer]]
name = "hss05"
url = "tcp://10.0.1.5:3868"
weight = 2
[[peer]]
name = "hss06"
url = "tcp://10.0.1.6:3868"
[[peer]]
name = "hss07"
url = "tcp://10.0.1.7:3868"
[[peer]]
name = "hss08"
url = "sctp://10.0.1.8:3868"
[[peer]]
name = "hss09"
url = "sctp://10.0.1.9:3868"
max-outstanding = 64
[[peer]]
name = "hss10"
url = "tcp://10.0.1.10:3868"
tw = "1m"
`
	cfg, err := config.Parse("client.toml", []byte(file))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Summary())
	for _, p := range cfg.Peers {
		fmt.Printf("%s %s weight %d tw %v max-outstanding %d\n", p.Name, p.URL, max(p.Weight, 1), p.Tw, p.Limits.MaxOutstanding)
	}

	// A mistake is reported with its line.
	_, err = config.Parse("client.toml", []byte("[[peer]]\nurl = \"tcp://10.0.1.1:3868\"\nwieght = 4\n"))
	fmt.Println(err)
	// Output:
	// origin-host client1.example.net, 0 listeners, 10 peers
	// hss01 tcp://10.0.1.1:3868 weight 4 tw 30s max-outstanding 256
	// hss02 tcp://10.0.1.2:3868 weight 4 tw 30s max-outstanding 256
	// hss03 tcp://10.0.1.3:3868 weight 2 tw 30s max-outstanding 256
	// hss04 tcp://10.0.1.4:3868 weight 2 tw 30s max-outstanding 256
	// hss05 tcp://10.0.1.5:3868 weight 2 tw 30s max-outstanding 256
	// hss06 tcp://10.0.1.6:3868 weight 1 tw 30s max-outstanding 256
	// hss07 tcp://10.0.1.7:3868 weight 1 tw 30s max-outstanding 256
	// hss08 sctp://10.0.1.8:3868 weight 1 tw 30s max-outstanding 256
	// hss09 sctp://10.0.1.9:3868 weight 1 tw 30s max-outstanding 64
	// hss10 tcp://10.0.1.10:3868 weight 1 tw 1m0s max-outstanding 256
	// client.toml:3: peer.wieght: unknown key "wieght" (did you mean "weight"?)
}
