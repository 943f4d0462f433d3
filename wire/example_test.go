package wire_test

import (
	"encoding/binary"
	"fmt"

	"github.com/aaatp/aaatp/wire"
	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
)

// Replaying a pending request on another connection after a failover: give
// it the new connection's Hop-by-Hop Identifier and the 'T' flag in place,
// and read an answer's Result-Code without decoding it.
func Example() {
	req := diam.NewMessage(diam.DeviceWatchdog, wire.FlagRequest, 0, 0x1111, 0x2222, dict.Default)
	req.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity("client.example.net"))
	msg, _ := req.Serialize()

	h, _ := wire.ParseHeader(msg)
	if err := wire.Validate(h, wire.DefaultMaxMessageLen); err != nil {
		panic(err)
	}
	hbh := wire.NewHopByHopGen(0x5000)
	wire.SetHopByHop(msg, hbh.Next())
	wire.SetRetransmit(msg)
	fmt.Printf("cmd %d hop-by-hop %#x end-to-end %#x retransmit %v\n",
		wire.CommandCode(msg), wire.HopByHop(msg), wire.EndToEnd(msg), wire.Flags(msg)&wire.FlagRetransmit != 0)

	ans := diam.NewMessage(diam.DeviceWatchdog, 0, 0, 0x5000, 0x2222, dict.Default)
	ans.NewAVP(avp.ResultCode, avp.Mbit, 0, datatype.Unsigned32(diam.Success))
	raw, _ := ans.Serialize()
	if rc, ok := wire.FindAVP(raw, avp.ResultCode, 0); ok {
		fmt.Println("Result-Code", binary.BigEndian.Uint32(rc))
	}

	m, err := wire.Decode(raw, dict.Default)
	fmt.Println(len(m.AVP), err)
	// Output:
	// cmd 280 hop-by-hop 0x5000 end-to-end 0x2222 retransmit true
	// Result-Code 2001
	// 1 <nil>
}
