package events

import (
	"strings"
	"testing"
)

func TestValidateURLs(t *testing.T) {
	tests := []struct {
		name    string
		urls    string
		wantErr string
	}{
		{name: "an empty value disables events and is valid", urls: ""},
		{name: "one nats URL is valid", urls: "nats://nats.s3csi:4222"},
		{name: "several servers of every dialable scheme are valid", urls: "nats://a:4222, tls://b:4222,ws://c:80,wss://d:443"},
		{name: "a URL without a scheme is rejected", urls: "localhost:4222", wantErr: "want nats://, tls://, ws:// or wss:// URLs"},
		{name: "an http URL is rejected", urls: "http://nats:4222", wantErr: `got "http://nats:4222"`},
		{name: "a URL without a host is rejected", urls: "nats://", wantErr: "has no host"},
		{name: "a bad second server is rejected", urls: "nats://a:4222,b:4222", wantErr: `got "b:4222"`},
		{name: "an unparsable URL is rejected", urls: "nats://a b:4222%", wantErr: "parse NATS URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateURLs(tt.urls)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateURLs(%q) = %v, want nil", tt.urls, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateURLs(%q) = %v, want an error containing %q", tt.urls, err, tt.wantErr)
			}
		})
	}
}
