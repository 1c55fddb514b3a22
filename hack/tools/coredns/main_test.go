package main

import (
	"slices"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
)

func TestEveryWantedPluginIsKept(t *testing.T) {
	kept := keepRegistered(dnsserver.Directives)
	for _, p := range wanted {
		if !slices.Contains(kept, p) {
			t.Errorf("plugin %q is not linked or not an upstream directive; kept %v", p, kept)
		}
	}
}

func TestKeptDirectivesFollowUpstreamOrder(t *testing.T) {
	kept := keepRegistered(dnsserver.Directives)
	last := -1
	for _, d := range kept {
		i := slices.Index(dnsserver.Directives, d)
		if i <= last {
			t.Fatalf("directive %q out of upstream order in %v", d, kept)
		}
		last = i
	}
}

func TestUnlinkedPluginsAreDropped(t *testing.T) {
	kept := keepRegistered(dnsserver.Directives)
	for _, p := range []string{"route53", "azure", "clouddns", "etcd", "hosts", "file"} {
		if slices.Contains(kept, p) {
			t.Errorf("directive %q kept but its plugin is not linked", p)
		}
	}
}
