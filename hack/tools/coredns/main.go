// Command coredns is CoreDNS v1.15.0 with only the plugins a cluster DNS needs, for the project's
// single-node test cluster (image s3csi/coredns). Upstream's main registers every plugin, which
// links cloud SDKs (Route 53, Azure, Cloud DNS, etcd) the cluster never uses.
package main

import (
	"strings"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	// The plugins of a Kubernetes cluster DNS (kubeadm's default Corefile, plus log).
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// wanted are the plugins a cluster DNS needs, by their Corefile names; the imports above link them
// (and, through them, a few they depend on, such as metadata and transfer).
var wanted = []string{
	"cache", "errors", "forward", "health", "kubernetes", "loadbalance", "log", "loop", "prometheus",
	"ready", "reload",
}

// keepRegistered filters upstream's directive list down to the plugins linked into this binary.
//
// Problem: CoreDNS runs plugins in the order of dnsserver.Directives, and its parser accepts any
// name in that list, so a Corefile naming a plugin that is not linked would parse and then fail.
// Solution: keep upstream's list, in upstream's order, minus the plugins not registered.
// Invariant: the relative order of the kept plugins is exactly upstream's.
func keepRegistered(all []string) []string {
	registered := map[string]bool{}
	for _, p := range caddy.ListPlugins()["others"] {
		if name, ok := strings.CutPrefix(p, "dns."); ok {
			registered[name] = true
		}
	}
	kept := make([]string, 0, len(registered))
	for _, d := range all {
		if registered[d] {
			kept = append(kept, d)
		}
	}
	return kept
}

func main() {
	dnsserver.Directives = keepRegistered(dnsserver.Directives)
	coremain.Run()
}
