// The etcd server the test tiers run (issue 28): etcd's own main, from go.etcd.io/etcd/server/v3.
// In etcd 3.6 the binary's main package is the repository's root module, which imports etcdmain.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
