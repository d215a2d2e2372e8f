// Command kcp_udp carries UDP datagrams over one kcp-go session, with
// kcptun's transport settings, so scripts/peers_bench.py can run kcptun's
// ARQ + Reed-Solomon FEC beside `groupwire tunnel` on the same traffic.
//
// kcptun (github.com/xtaci/kcptun) itself carries TCP streams (smux over
// one KCP session) and its repository no longer holds its code; its
// transport and FEC are kcp-go's, which this drives with kcptun's defaults:
// -datashard 10 -parityshard 3, -mode fast (nodelay 0, interval 30 ms,
// resend 2, no congestion window), -mtu 1350, -sndwnd 128 (client)
// -rcvwnd 512 (client) / 1024 (server), -sockbuf 4 MiB, -nocomp,
// -crypt none. One change: message mode instead of stream mode, so each
// datagram is one KCP message and keeps its boundary without a framing
// layer (kcptun's smux frames would add 8 bytes a datagram).
//
//	kcp_udp server --listen ADDR --forward ADDR [--duration SECS]
//	kcp_udp client --listen ADDR --peer ADDR [--duration SECS]
//
// Both print {"listen": ADDR} on stdout once bound, and kcp-go's counters as
// one JSON line on stdout when --duration is over.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	kcp "github.com/xtaci/kcp-go/v5"
)

const sockbuf = 4 << 20

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: kcp_udp server|client ...")
	}
	role := os.Args[1]
	fs := flag.NewFlagSet(role, flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to bind")
	peer := fs.String("peer", "", "client: the server's KCP address")
	forward := fs.String("forward", "", "server: where datagrams go")
	duration := fs.Float64("duration", 10, "seconds, then exit")
	datashard := fs.Int("datashard", 10, "Reed-Solomon data shards (kcptun -datashard)")
	parityshard := fs.Int("parityshard", 3, "Reed-Solomon parity shards (kcptun -parityshard)")
	nodelay := fs.Int("nodelay", 0, "kcptun -mode fast: 0")
	interval := fs.Int("interval", 30, "kcptun -mode fast: 30 ms")
	resend := fs.Int("resend", 2, "kcptun -mode fast: 2")
	nc := fs.Int("nc", 1, "kcptun -mode fast: 1 (no congestion window)")
	if err := fs.Parse(os.Args[2:]); err != nil {
		log.Fatal(err)
	}
	tune := func(s *kcp.UDPSession, sndwnd, rcvwnd int) {
		s.SetStreamMode(false)
		s.SetWriteDelay(false)
		s.SetNoDelay(*nodelay, *interval, *resend, *nc)
		s.SetMtu(1350)
		s.SetWindowSize(sndwnd, rcvwnd)
		s.SetACKNoDelay(false)
		_ = s.SetReadBuffer(sockbuf)
		_ = s.SetWriteBuffer(sockbuf)
	}
	go func() {
		time.Sleep(time.Duration(*duration * float64(time.Second)))
		snmp := kcp.DefaultSnmp.Copy()
		out, _ := json.Marshal(map[string]uint64{
			"out_pkts": snmp.OutPkts, "out_bytes": snmp.OutBytes, "in_pkts": snmp.InPkts,
			"retrans_segs": snmp.RetransSegs, "fast_retrans_segs": snmp.FastRetransSegs,
			"lost_segs": snmp.LostSegs, "fec_recovered": snmp.FECRecovered, "fec_errs": snmp.FECErrs,
		})
		fmt.Println(string(out))
		os.Exit(0)
	}()
	switch role {
	case "server":
		l, err := kcp.ListenWithOptions(*listen, nil, *datashard, *parityshard)
		if err != nil {
			log.Fatal(err)
		}
		_ = l.SetReadBuffer(sockbuf)
		_ = l.SetWriteBuffer(sockbuf)
		ready(l.Addr())
		to, err := net.ResolveUDPAddr("udp", *forward)
		if err != nil {
			log.Fatal(err)
		}
		for {
			s, err := l.AcceptKCP()
			if err != nil {
				log.Fatal(err)
			}
			tune(s, 1024, 1024)
			go serve(s, to)
		}
	case "client":
		app, err := net.ListenPacket("udp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		if u, ok := app.(*net.UDPConn); ok {
			_ = u.SetReadBuffer(sockbuf)
		}
		s, err := kcp.DialWithOptions(*peer, nil, *datashard, *parityshard)
		if err != nil {
			log.Fatal(err)
		}
		tune(s, 128, 512)
		ready(app.LocalAddr())
		buf := make([]byte, 65536)
		for {
			n, _, err := app.ReadFrom(buf)
			if err != nil {
				log.Fatal(err)
			}
			if _, err := s.Write(buf[:n]); err != nil {
				log.Fatal(err)
			}
		}
	default:
		log.Fatalf("unknown role %q", role)
	}
}

// ready prints the bound address for the bench.
func ready(a net.Addr) {
	out, _ := json.Marshal(map[string]string{"listen": a.String()})
	fmt.Println(string(out))
}

// serve forwards each message of s as one datagram to to.
func serve(s *kcp.UDPSession, to *net.UDPAddr) {
	out, err := net.DialUDP("udp", nil, to)
	if err != nil {
		log.Fatal(err)
	}
	_ = out.SetWriteBuffer(sockbuf)
	buf := make([]byte, 65536)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		_, _ = out.Write(buf[:n])
	}
}
