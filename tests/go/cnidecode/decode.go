package main

// What each plugin reads from the config it gets on stdin, decoded as the plugin decodes it:
// encoding/json into the plugin's own struct (plugins.go), so a key matches a field exactly or
// by Go's case folding, the last key that matches a field wins, and an object given twice for a
// struct field fills the same struct.
//
// A reading stops where the plugin stops: when json.Unmarshal fails the plugin fails before it
// does anything, so the reading has only "exec" and "error". Checks a plugin makes after decoding
// (a VLAN ID out of range, host-local with no range) are not modelled: a reading may describe a
// config the plugin would go on to refuse, which judges more, never less.

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// reading is what one plugin reads, as JSON: keys named like the config keys they come from.
type reading map[string]any

const (
	// bridge's defaultBrName: the bridge a config without "bridge" joins.
	bridgeDefaultName = "cni0"
	// portmap's DefaultMarkBit.
	portmapDefaultMarkBit = 13
)

// The main plugins that run the IPAM plugin the config's ipam.type names, with their own
// stdin. A plugin netattach does not know is assumed to do the same (most third-party main
// plugins do): it errs on the side of judging more.
var metaOrIPAM = map[string]bool{
	"tuning": true, "portmap": true, "bandwidth": true, "sbr": true, "vrf": true,
	"firewall": true, "loopback": true, "host-local": true, "static": true, "dhcp": true,
}

// decodeConfig reads a config as netattach runs it: a config list when its object has a key
// spelled exactly "plugins" (netattach's parser, and Multus's, tell them apart so), each plugin
// getting its own object; otherwise a single plugin getting the whole object.
func decodeConfig(data []byte) (reading, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	objects := []json.RawMessage{data}
	if list, ok := top["plugins"]; ok {
		objects = nil
		if err := json.Unmarshal(list, &objects); err != nil {
			return nil, fmt.Errorf("plugins is not a list of objects: %w", err)
		}
	}
	plugins := make([]reading, 0, len(objects))
	for _, object := range objects {
		plugins = append(plugins, decodePlugin(object))
	}
	return reading{"plugins": plugins}, nil
}

// execType is the plugin netattach runs: the value of the key spelled exactly "type" (its
// parser is Python's json, exact keys, the last of a repeated key), "" when there is none.
func execType(object []byte) string {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(object, &keys); err != nil {
		return ""
	}
	var kind string
	if err := json.Unmarshal(keys["type"], &kind); err != nil {
		return ""
	}
	return kind
}

func decodePlugin(object []byte) reading {
	exec := execType(object)
	r := reading{"exec": exec}
	var err error
	switch exec {
	case "bridge":
		err = readBridge(object, r)
	case "macvlan":
		err = readMacvlan(object, r)
	case "ipvlan":
		err = readIpvlan(object, r)
	case "ptp":
		err = readPtp(object, r)
	case "vlan":
		err = readVlan(object, r)
	case "host-device":
		err = readHostDevice(object, r)
	case "tuning":
		err = readTuning(object, r)
	case "portmap":
		err = readPortmap(object, r)
	case "bandwidth":
		err = readBandwidth(object, r)
	case "sbr":
		err = readSbr(object, r)
	case "vrf":
		err = readVrf(object, r)
	case "firewall":
		err = readFirewall(object, r)
	case "host-local", "static", "dhcp":
		// An IPAM plugin run as the plugin itself reads its ipam object as under a main plugin.
		r["ipam"] = readIPAM(exec, object)
		return r
	default:
		var n types.NetConf
		err = json.Unmarshal(object, &n)
		if err == nil {
			common(r, &n)
		}
	}
	if err != nil {
		return reading{"exec": exec, "error": err.Error()}
	}
	if ipamType, _ := r["ipamType"].(string); ipamType != "" && !metaOrIPAM[exec] {
		r["ipam"] = readIPAM(ipamType, object)
	}
	return r
}

// common is what every plugin embedding types.NetConf reads: its type, and the IPAM plugin a
// main plugin runs (ipam.ExecAdd/ExecDel of n.IPAM.Type, with the same stdin).
func common(r reading, n *types.NetConf) {
	r["type"] = n.Type
	r["ipamType"] = n.IPAM.Type
}

func readBridge(object []byte, r reading) error {
	n := bridgeConf{BrName: bridgeDefaultName}
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	mac := n.Args.Cni.Mac
	if n.RuntimeConfig.Mac != "" {
		mac = n.RuntimeConfig.Mac
	}
	r["bridge"] = n.BrName
	r["isGateway"] = n.IsGW
	r["isDefaultGateway"] = n.IsDefaultGW
	r["forceAddress"] = n.ForceAddress
	r["ipMasq"] = n.IPMasq
	r["hairpinMode"] = n.HairpinMode
	r["promiscMode"] = n.PromiscMode
	r["vlan"] = n.Vlan
	r["macspoofchk"] = n.MacSpoofChk
	r["portIsolation"] = n.PortIsolation
	r["disableContainerInterface"] = n.DisableContainerInterface
	r["mac"] = mac
	return nil
}

func readMacvlan(object []byte, r reading) error {
	var n macvlanConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	mac := n.Mac
	if n.RuntimeConfig.Mac != "" {
		mac = n.RuntimeConfig.Mac
	}
	r["master"] = n.Master
	r["mode"] = n.Mode
	r["linkInContainer"] = n.LinkContNs
	r["mac"] = mac
	return nil
}

func readIpvlan(object []byte, r reading) error {
	var n ipvlanConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["master"] = n.Master
	r["mode"] = n.Mode
	r["linkInContainer"] = n.LinkContNs
	return nil
}

func readPtp(object []byte, r reading) error {
	var n ptpConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["ipMasq"] = n.IPMasq
	return nil
}

func readVlan(object []byte, r reading) error {
	var n vlanConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["master"] = n.Master
	r["vlanId"] = n.VlanID
	r["linkInContainer"] = n.LinkContNs
	return nil
}

func readHostDevice(object []byte, r reading) error {
	var n hostDeviceConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["device"] = n.Device
	r["hwaddr"] = n.HWAddr
	r["kernelpath"] = n.KernelPath
	r["pciBusID"] = n.PCIAddr
	r["deviceID"] = n.RuntimeConfig.DeviceID
	r["dpdkMode"] = n.DPDKMode
	r["useInterfaceNetwork"] = n.UseInterfaceNetwork
	return nil
}

func readTuning(object []byte, r reading) error {
	n := tuningConf{Promisc: false}
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	// tuning copies args.cni.sysctl over sysctl (and panics when sysctl is absent: the union is
	// reported anyway).
	sysctl := map[string]string{}
	for key, value := range n.SysCtl {
		sysctl[key] = value
	}
	mac := n.Mac
	if n.RuntimeConfig.Mac != "" {
		mac = n.RuntimeConfig.Mac
	}
	promisc := n.Promisc
	if n.Args != nil && n.Args.A != nil {
		if n.Args.A.SysCtl != nil {
			for key, value := range *n.Args.A.SysCtl {
				sysctl[key] = value
			}
		}
		if n.Args.A.Mac != nil {
			mac = *n.Args.A.Mac
		}
		if n.Args.A.Promisc != nil {
			promisc = *n.Args.A.Promisc
		}
	}
	r["dataDir"] = n.DataDir // "" is tuning's default, /run/cni/tuning
	r["sysctl"] = sysctl
	r["mac"] = mac
	r["promisc"] = promisc
	return nil
}

func readPortmap(object []byte, r reading) error {
	var n portmapConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	snat := true
	if n.SNAT != nil {
		snat = *n.SNAT
	}
	markMasqBit := portmapDefaultMarkBit
	if n.MarkMasqBit != nil {
		markMasqBit = *n.MarkMasqBit
	}
	mappings := make([]reading, 0, len(n.RuntimeConfig.PortMaps))
	for _, entry := range n.RuntimeConfig.PortMaps {
		mappings = append(mappings, reading{
			"hostPort":      entry.HostPort,
			"containerPort": entry.ContainerPort,
			"protocol":      entry.Protocol,
			"hostIP":        entry.HostIP,
		})
	}
	r["snat"] = snat
	r["masqAll"] = n.MasqAll
	r["markMasqBit"] = markMasqBit
	r["backend"] = n.Backend
	r["conditionsV4"] = n.ConditionsV4
	r["conditionsV6"] = n.ConditionsV6
	r["externalSetMarkChain"] = n.ExternalSetMarkChain
	r["portMappings"] = mappings
	return nil
}

func readBandwidth(object []byte, r reading) error {
	var n bandwidthConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	entry := n.RuntimeConfig.Bandwidth // the capability wins over the config's own keys
	if entry == nil {
		entry = n.BandwidthEntry
	}
	if entry != nil {
		r["bandwidth"] = reading{
			"ingressRate": entry.IngressRate, "ingressBurst": entry.IngressBurst,
			"egressRate": entry.EgressRate, "egressBurst": entry.EgressBurst,
		}
	}
	return nil
}

func readSbr(object []byte, r reading) error {
	var n sbrConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["table"] = n.Table
	r["gateways"] = n.Gateways
	r["addSourceHints"] = n.AddSourceHints
	return nil
}

func readVrf(object []byte, r reading) error {
	var n vrfConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["vrfname"] = n.VRFName
	r["table"] = n.Table
	return nil
}

func readFirewall(object []byte, r reading) error {
	var n firewallConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	common(r, &n.NetConf)
	r["backend"] = n.Backend
	r["iptablesAdminChainName"] = n.IptablesAdminChainName
	r["firewalldZone"] = n.FirewalldZone
	r["ingressPolicy"] = n.IngressPolicy
	return nil
}

// readIPAM is what the IPAM plugin `plugin` reads from the same stdin: its ipam object, and the
// top-level keys its struct has (args.cni.ips, runtimeConfig.ips, name).
func readIPAM(plugin string, object []byte) reading {
	r := reading{"plugin": plugin}
	var err error
	switch plugin {
	case "host-local":
		err = readHostLocal(object, r)
	case "static":
		err = readStatic(object, r)
	case "dhcp":
		err = readDHCP(object, r)
	default:
		r["known"] = false
		return r
	}
	if err != nil {
		return reading{"plugin": plugin, "error": err.Error()}
	}
	return r
}

func readHostLocal(object []byte, r reading) error {
	// allocator.LoadIPAMConfig's decoding, without the checks that follow it.
	var n allocator.Net
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	if n.IPAM == nil {
		return fmt.Errorf("IPAM config missing 'ipam' key")
	}
	var ranges []allocator.Range
	if n.IPAM.Range != nil && n.IPAM.Range.Subnet.IP != nil {
		ranges = append(ranges, *n.IPAM.Range)
	}
	for _, set := range append(append([]allocator.RangeSet{}, n.RuntimeConfig.IPRanges...), n.IPAM.Ranges...) {
		ranges = append(ranges, set...)
	}
	shown := make([]reading, 0, len(ranges))
	for _, rng := range ranges {
		subnet := net.IPNet(rng.Subnet)
		shown = append(shown, reading{
			"subnet":     ipNetText(&subnet),
			"rangeStart": ipText(rng.RangeStart),
			"rangeEnd":   ipText(rng.RangeEnd),
			"gateway":    ipText(rng.Gateway),
		})
	}
	ips := []string{}
	if n.Args != nil && n.Args.A != nil {
		for _, requested := range n.Args.A.IPs {
			ips = append(ips, requested.String())
		}
	}
	for _, requested := range n.RuntimeConfig.IPs {
		ips = append(ips, requested.String())
	}
	r["type"] = n.IPAM.Type
	r["dataDir"] = n.IPAM.DataDir // "" is host-local's default, /var/lib/cni/networks
	r["resolvConf"] = n.IPAM.ResolvConf
	r["ranges"] = shown
	r["routes"] = routesText(n.IPAM.Routes)
	r["ips"] = ips
	return nil
}

func readStatic(object []byte, r reading) error {
	var n staticNet
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	if n.IPAM == nil {
		return fmt.Errorf("IPAM config missing 'ipam' key")
	}
	// static's addresses: its ipam's, unless args.cni.ips or runtimeConfig.ips (later wins)
	// replace them; an address given as an "Address" object is used as it is.
	addresses := []reading{}
	for _, address := range n.IPAM.Addresses {
		text := address.AddressStr
		if address.Address.IP != nil {
			text = address.Address.String()
		}
		addresses = append(addresses, reading{"address": text, "gateway": ipText(address.Gateway)})
	}
	replace := func(ips []string) {
		addresses = []reading{}
		for _, ip := range ips {
			addresses = append(addresses, reading{"address": ip, "gateway": ""})
		}
	}
	if n.Args != nil && n.Args.A != nil && len(n.Args.A.IPs) != 0 {
		replace(n.Args.A.IPs)
	}
	if len(n.RuntimeConfig.IPs) != 0 {
		replace(n.RuntimeConfig.IPs)
	}
	r["type"] = n.IPAM.Type
	r["addresses"] = addresses
	r["routes"] = routesText(n.IPAM.Routes)
	r["dns"] = n.IPAM.DNS
	return nil
}

func readDHCP(object []byte, r reading) error {
	var n dhcpConf
	if err := json.Unmarshal(object, &n); err != nil {
		return err
	}
	if n.IPAM == nil {
		return fmt.Errorf("IPAM config missing 'ipam' key")
	}
	r["type"] = n.IPAM.Type
	r["daemonSocketPath"] = n.IPAM.DaemonSocketPath
	r["provide"] = n.IPAM.ProvideOptions
	r["request"] = n.IPAM.RequestOptions
	return nil
}

func routesText(routes []*types.Route) []reading {
	shown := make([]reading, 0, len(routes))
	for _, route := range routes {
		if route == nil {
			continue
		}
		shown = append(shown, reading{"dst": ipNetText(&route.Dst), "gw": ipText(route.GW)})
	}
	return shown
}

func ipText(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}

func ipNetText(n *net.IPNet) string {
	if n.IP == nil {
		return ""
	}
	return n.String()
}
