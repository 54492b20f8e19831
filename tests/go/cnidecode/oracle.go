package main

// The value oracle (SEC-VALUES): how a reference plugin reads an address, a CIDR or a host
// interface name, with the code the plugins themselves call.
//
//	cnidecode -addr    one {"kind": "ip"|"cidr", "text": "..."} a line; answers one line each:
//	                   {"ok": bool, "ip": "...", "v4": bool, "prefix": n, "bits": m}
//	                   "ip" uses net.ParseIP, "cidr" github.com/containernetworking/cni's
//	                   types.ParseCIDR (what the plugins' IPAM and route types decode with).
//	                   "ip" is the address as the plugins act on it: To4() when that is non-nil
//	                   (an IPv4-mapped IPv6 spelling is IPv4), else To16(), printed by String();
//	                   "v4" is To4() != nil; "prefix" and "bits" are the mask's Size() (0 and 0
//	                   for an "ip"). A text Go refuses gives {"ok": false, ...zero values}.
//	cnidecode -links   one {"name": "..."} a line; answers {"found": bool, "name": "...",
//	                   "index": n}: github.com/vishvananda/netlink's LinkByName (what
//	                   macvlan, ipvlan, bridge, vlan and host-device look their names up with)
//	                   in the caller's network namespace, and the primary name and index of
//	                   the link it returns. A lookup that fails otherwise than "not found" also
//	                   gives {"found": false} with its "error".
//
// Both read their input as JSON, as the plugins do (a lone surrogate escape is U+FFFD to Go).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
)

type addrQuery struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

type addrAnswer struct {
	OK     bool   `json:"ok"`
	IP     string `json:"ip"`
	V4     bool   `json:"v4"`
	Prefix int    `json:"prefix"`
	Bits   int    `json:"bits"`
	Error  string `json:"error,omitempty"`
}

type linkQuery struct {
	Name string `json:"name"`
}

type linkAnswer struct {
	Found bool   `json:"found"`
	Name  string `json:"name"`
	Index int    `json:"index"`
	Error string `json:"error,omitempty"`
}

// readAddr answers one -addr query.
func readAddr(line []byte) addrAnswer {
	var q addrQuery
	if err := json.Unmarshal(line, &q); err != nil {
		return addrAnswer{Error: fmt.Sprintf("bad query: %v", err)}
	}
	var ip net.IP
	prefix, bits := 0, 0
	switch q.Kind {
	case "ip":
		ip = net.ParseIP(q.Text)
	case "cidr":
		ipn, err := types.ParseCIDR(q.Text)
		if err == nil {
			ip = ipn.IP
			prefix, bits = ipn.Mask.Size()
		}
	default:
		return addrAnswer{Error: fmt.Sprintf("bad query: kind %q", q.Kind)}
	}
	if ip == nil {
		return addrAnswer{}
	}
	if v4 := ip.To4(); v4 != nil {
		return addrAnswer{OK: true, IP: v4.String(), V4: true, Prefix: prefix, Bits: bits}
	}
	return addrAnswer{OK: true, IP: ip.To16().String(), Prefix: prefix, Bits: bits}
}

// readLink answers one -links query in the current network namespace.
func readLink(line []byte) linkAnswer {
	var q linkQuery
	if err := json.Unmarshal(line, &q); err != nil {
		return linkAnswer{Error: fmt.Sprintf("bad query: %v", err)}
	}
	link, err := netlink.LinkByName(q.Name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return linkAnswer{}
		}
		return linkAnswer{Error: err.Error()}
	}
	attrs := link.Attrs()
	return linkAnswer{Found: true, Name: attrs.Name, Index: attrs.Index}
}

// runLines answers each non-blank line of `in` with one JSON line of `out`, in order.
func runLines[T any](in io.Reader, out io.Writer, answer func([]byte) T) int {
	reader := bufio.NewReaderSize(in, 1<<20)
	writer := bufio.NewWriterSize(out, 1<<20)
	encoder := json.NewEncoder(writer)
	for {
		line, err := reader.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if encodeErr := encoder.Encode(answer(line)); encodeErr != nil {
				fmt.Fprintln(os.Stderr, "cnidecode:", encodeErr)
				return 2
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cnidecode:", err)
			return 2
		}
	}
	if err := writer.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "cnidecode:", err)
		return 2
	}
	return 0
}
