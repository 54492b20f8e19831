package main

// The config structs of the reference plugins (github.com/containernetworking/plugins, the
// version go.mod names), declared here because the plugins declare theirs in `main` packages.
// Each carries, in the plugin's field order, the JSON names and Go types its plugin's struct
// has: encoding/json's matching depends on all three (a key that matches no field exactly goes
// to the first field, in order, whose name folds to it; a shallower field hides a deeper one).
// `cnidecode -drift DIR` compares them with the plugins' source, so a new release that changes
// a struct fails the test tier instead of being decoded the old way.
//
// host-local's structs are the plugin's own (allocator.Net), imported.

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
)

// bridge: plugins/main/bridge/bridge.go NetConf.
type bridgeConf struct {
	types.NetConf
	BrName                    string             `json:"bridge"`
	IsGW                      bool               `json:"isGateway"`
	IsDefaultGW               bool               `json:"isDefaultGateway"`
	ForceAddress              bool               `json:"forceAddress"`
	IPMasq                    bool               `json:"ipMasq"`
	IPMasqBackend             *string            `json:"ipMasqBackend,omitempty"`
	MTU                       int                `json:"mtu"`
	HairpinMode               bool               `json:"hairpinMode"`
	PromiscMode               bool               `json:"promiscMode"`
	Vlan                      int                `json:"vlan"`
	VlanTrunk                 []*bridgeVlanTrunk `json:"vlanTrunk,omitempty"`
	PreserveDefaultVlan       bool               `json:"preserveDefaultVlan"`
	MacSpoofChk               bool               `json:"macspoofchk,omitempty"`
	EnableDad                 bool               `json:"enabledad,omitempty"`
	DisableContainerInterface bool               `json:"disableContainerInterface,omitempty"`
	PortIsolation             bool               `json:"portIsolation,omitempty"`

	Args struct {
		Cni bridgeArgs `json:"cni,omitempty"`
	} `json:"args,omitempty"`
	RuntimeConfig struct {
		Mac string `json:"mac,omitempty"`
	} `json:"runtimeConfig,omitempty"`
}

type bridgeVlanTrunk struct {
	MinID *int `json:"minID,omitempty"`
	MaxID *int `json:"maxID,omitempty"`
	ID    *int `json:"id,omitempty"`
}

type bridgeArgs struct {
	Mac string `json:"mac,omitempty"`
}

// macvlan: plugins/main/macvlan/macvlan.go NetConf.
type macvlanConf struct {
	types.NetConf
	Master     string `json:"master"`
	Mode       string `json:"mode"`
	MTU        int    `json:"mtu"`
	Mac        string `json:"mac,omitempty"`
	LinkContNs bool   `json:"linkInContainer,omitempty"`
	BcQueueLen uint32 `json:"bcqueuelen,omitempty"`

	RuntimeConfig struct {
		Mac string `json:"mac,omitempty"`
	} `json:"runtimeConfig,omitempty"`
}

// ipvlan: plugins/main/ipvlan/ipvlan.go NetConf.
type ipvlanConf struct {
	types.NetConf
	Master     string `json:"master"`
	Mode       string `json:"mode"`
	MTU        int    `json:"mtu"`
	LinkContNs bool   `json:"linkInContainer,omitempty"`
}

// ptp: plugins/main/ptp/ptp.go NetConf.
type ptpConf struct {
	types.NetConf
	IPMasq        bool    `json:"ipMasq"`
	IPMasqBackend *string `json:"ipMasqBackend,omitempty"`
	MTU           int     `json:"mtu"`
}

// vlan: plugins/main/vlan/vlan.go NetConf.
type vlanConf struct {
	types.NetConf
	Master     string `json:"master"`
	VlanID     int    `json:"vlanId"`
	MTU        int    `json:"mtu,omitempty"`
	LinkContNs bool   `json:"linkInContainer,omitempty"`
}

// host-device: plugins/main/host-device/host-device.go NetConf. DPDKMode has no tag, so the
// plugin reads it from a key spelled (or folding to) "DPDKMode".
type hostDeviceConf struct {
	types.NetConf
	Device        string `json:"device"`
	HWAddr        string `json:"hwaddr"`
	DPDKMode      bool
	KernelPath    string `json:"kernelpath"`
	PCIAddr       string `json:"pciBusID"`
	RuntimeConfig struct {
		DeviceID string `json:"deviceID,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	UseInterfaceNetwork bool `json:"useInterfaceNetwork,omitempty"`
}

// tuning: plugins/meta/tuning/tuning.go TuningConf and IPAMArgs (its args.cni).
type tuningConf struct {
	types.NetConf
	DataDir  string            `json:"dataDir,omitempty"`
	SysCtl   map[string]string `json:"sysctl"`
	Mac      string            `json:"mac,omitempty"`
	Promisc  bool              `json:"promisc,omitempty"`
	Mtu      int               `json:"mtu,omitempty"`
	TxQLen   *int              `json:"txQLen,omitempty"`
	Allmulti *bool             `json:"allmulti,omitempty"`

	RuntimeConfig struct {
		Mac string `json:"mac,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args *struct {
		A *tuningArgs `json:"cni"`
	} `json:"args"`
}

type tuningArgs struct {
	SysCtl   *map[string]string `json:"sysctl"`
	Mac      *string            `json:"mac,omitempty"`
	Promisc  *bool              `json:"promisc,omitempty"`
	Mtu      *int               `json:"mtu,omitempty"`
	Allmulti *bool              `json:"allmulti,omitempty"`
	TxQLen   *int               `json:"txQLen,omitempty"`
}

// portmap: plugins/meta/portmap/main.go PortMapConf and PortMapEntry.
type portmapConf struct {
	types.NetConf

	Backend       *string   `json:"backend,omitempty"`
	SNAT          *bool     `json:"snat,omitempty"`
	ConditionsV4  *[]string `json:"conditionsV4"`
	ConditionsV6  *[]string `json:"conditionsV6"`
	MasqAll       bool      `json:"masqAll,omitempty"`
	MarkMasqBit   *int      `json:"markMasqBit"`
	RuntimeConfig struct {
		PortMaps []portmapEntry `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`

	ExternalSetMarkChain *string `json:"externalSetMarkChain"`
}

type portmapEntry struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// bandwidth: plugins/meta/bandwidth/main.go PluginConf and BandwidthEntry (embedded: its keys
// are read at the top level too).
type bandwidthConf struct {
	types.NetConf

	RuntimeConfig struct {
		Bandwidth *BandwidthEntry `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig,omitempty"`

	*BandwidthEntry
}

// Exported: encoding/json cannot fill an embedded pointer to an unexported struct.
type BandwidthEntry struct {
	IngressRate  uint64 `json:"ingressRate"`
	IngressBurst uint64 `json:"ingressBurst"`
	EgressRate   uint64 `json:"egressRate"`
	EgressBurst  uint64 `json:"egressBurst"`
}

// sbr: plugins/meta/sbr/main.go PluginConf (its prevResult hides types.NetConf's).
type sbrConf struct {
	types.NetConf

	RawPrevResult  *map[string]interface{} `json:"prevResult"`
	Table          *int                    `json:"table,omitempty"`
	Gateways       []string                `json:"gateways,omitempty"`
	AddSourceHints bool                    `json:"addSourceHints,omitempty"`
}

// vrf: plugins/meta/vrf/main.go VRFNetConf.
type vrfConf struct {
	types.NetConf
	VRFName string `json:"vrfname"`
	Table   uint32 `json:"table"`
}

// firewall: plugins/meta/firewall/firewall.go FirewallNetConf (IngressPolicy is an alias of
// string there).
type firewallConf struct {
	types.NetConf
	Backend                string `json:"backend"`
	IptablesAdminChainName string `json:"iptablesAdminChainName,omitempty"`
	FirewalldZone          string `json:"firewalldZone,omitempty"`
	IngressPolicy          string `json:"ingressPolicy,omitempty"`
}

// static: plugins/ipam/static/main.go Net, IPAMConfig, IPAMArgs and Address. IPAMConfig.Name
// and Address.Address/Version have no tag: the keys "Name", "Address" and "Version" (and what
// folds to them) reach them.
type staticNet struct {
	Name       string            `json:"name"`
	CNIVersion string            `json:"cniVersion"`
	IPAM       *staticIPAMConfig `json:"ipam"`

	RuntimeConfig struct {
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args *struct {
		A *staticArgs `json:"cni"`
	} `json:"args"`
}

type staticIPAMConfig struct {
	Name      string
	Type      string          `json:"type"`
	Routes    []*types.Route  `json:"routes"`
	Addresses []staticAddress `json:"addresses,omitempty"`
	DNS       types.DNS       `json:"dns"`
}

type staticArgs struct {
	IPs []string `json:"ips"`
}

type staticAddress struct {
	AddressStr string `json:"address"`
	Gateway    net.IP `json:"gateway,omitempty"`
	Address    net.IPNet
	Version    string
}

// dhcp: plugins/ipam/dhcp/main.go NetConf and IPAMConfig (its ipam hides types.NetConf's).
type dhcpConf struct {
	types.NetConf
	IPAM *dhcpIPAMConfig `json:"ipam"`
}

type dhcpIPAMConfig struct {
	types.IPAM
	DaemonSocketPath string              `json:"daemonSocketPath"`
	ProvideOptions   []dhcpProvideOption `json:"provide"`
	RequestOptions   []dhcpRequestOption `json:"request"`
	Priority         int                 `json:"priority,omitempty"`
}

type dhcpOption string

type dhcpProvideOption struct {
	Option dhcpOption `json:"option"`

	Value           string `json:"value"`
	ValueFromCNIArg string `json:"fromArg"`
}

type dhcpRequestOption struct {
	SkipDefault bool `json:"skipDefault"`

	Option dhcpOption `json:"option"`
}
