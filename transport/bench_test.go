package transport

import (
	"testing"
)

// BenchmarkReadWrite sends batches of 100 small (DWR-sized, 64-byte)
// messages over loopback TCP with the default options (Nagle on) and reads
// them back on the other side.
func BenchmarkReadWrite(b *testing.B) {
	for _, nodelay := range []bool{false, true} {
		name := "nagle"
		if nodelay {
			name = "nodelay"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := Listen("tcp://127.0.0.1:0", Options{NoDelay: nodelay})
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c
				}
				close(accepted)
			}()
			cli, err := Dial(b.Context(), "tcp://"+ln.Addr().String(), Options{NoDelay: nodelay})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			srv := <-accepted
			if srv == nil {
				b.Fatal("accept failed")
			}
			defer srv.Close()

			const batchLen, msgLen = 100, 64
			batch := make([][]byte, batchLen)
			for i := range batch {
				batch[i] = testMsg(msgLen, 280, uint32(i))
			}
			errc := make(chan error, 1)
			b.SetBytes(batchLen * msgLen)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if err := cli.WriteMessages(batch...); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := 0; i < b.N*batchLen; i++ {
				if _, err := srv.ReadMessage(); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
	}
}
