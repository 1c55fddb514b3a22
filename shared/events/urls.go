package events

import (
	"fmt"
	"net/url"
	"strings"
)

// ValidateURLs checks the value of a service's --nats-url before anything starts: empty (events
// disabled: they are only hints, so the services stay correct without them) or comma-separated
// URLs with a scheme the NATS client dials and a host. Connect would accept a bad value and keep
// reconnecting to nothing, so a typo is caught here instead of showing as missing events.
func ValidateURLs(urls string) error {
	if urls == "" {
		return nil
	}
	for raw := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("parse NATS URL: %w", err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("want nats://, tls://, ws:// or wss:// URLs, got %q", raw)
		}
		if u.Host == "" {
			return fmt.Errorf("NATS URL %q has no host", raw)
		}
	}
	return nil
}
