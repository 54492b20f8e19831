package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeclaredStructsMatchThePlugins is `cnidecode -drift` under `go test`: the plugins module
// is found where the build found it.
func TestDeclaredStructsMatchThePlugins(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/containernetworking/plugins").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	problems, err := driftReport(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range problems {
		t.Error(problem)
	}
}

// TestAKeyReachesTheFieldItFoldsTo: the decoding the property relies on, on one config.
func TestAKeyReachesTheFieldItFoldsTo(t *testing.T) {
	config := `{"type":"host-device","device":"ok","DEVICE":"uplink","ipam":{"type":"host-local","TYPE":"x","DataDir":"/etc"}}`
	r, err := decodeConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	plugin := r["plugins"].([]reading)[0]
	if plugin["device"] != "uplink" || plugin["ipamType"] != "x" {
		t.Errorf("got %v", plugin)
	}
	// ſ (U+017F) folds to s, K (U+212A) to k.
	r, err = decodeConfig([]byte(`{"plugins":[{"type":"macvlan","maſter":"eth0"},{"type":"host-device","\u212aernelpath":"/x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	plugins := r["plugins"].([]reading)
	if plugins[0]["master"] != "eth0" || plugins[1]["kernelpath"] != "/x" {
		t.Errorf("got %v", plugins)
	}
}
