package controller

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

func TestClientsCacheExpiresAndRereadsDriverCredentials(t *testing.T) {
	reads := 0
	driver := func() (s3client.Credentials, error) {
		reads++
		return s3client.Credentials{AccessKeyID: "AK" + strconv.Itoa(reads), SecretAccessKey: "SK"}, nil
	}
	now := time.Unix(0, 0)
	c := newClients(s3client.Endpoint{URL: "http://127.0.0.1:1"}, http.DefaultClient, driver, time.Minute)
	c.now = func() time.Time { return now }

	first, source, err := c.forSecrets(nil)
	if err != nil || source != "driver" {
		t.Fatalf("forSecrets(nil) = %v, %q", err, source)
	}
	again, _, _ := c.forSecrets(nil)
	if again != first || reads != 1 {
		t.Errorf("within the TTL: same client %v, reads %d; want the cached client and 1 read", again == first, reads)
	}
	now = now.Add(time.Minute)
	if renewed, _, _ := c.forSecrets(nil); renewed == first || reads != 2 {
		t.Errorf("after the TTL: same client %v, reads %d; want a new client and 2 reads", renewed == first, reads)
	}

	a, source, err := c.forSecrets(map[string]string{SecretAccessKeyID: "A", SecretSecretAccessKey: "S"})
	if err != nil || source != "secret" {
		t.Fatalf("forSecrets(secret) = %v, %q", err, source)
	}
	b, _, _ := c.forSecrets(map[string]string{SecretAccessKeyID: "A", SecretSecretAccessKey: "S", SecretRegion: "eu"})
	if a == b {
		t.Error("a secret naming another region shares the client")
	}
}

func TestClientsCacheIsBounded(t *testing.T) {
	c := newClients(s3client.Endpoint{URL: "http://127.0.0.1:1"}, http.DefaultClient, nil, time.Hour)
	for i := range maxCachedClients + 10 {
		if _, _, err := c.forSecrets(map[string]string{SecretAccessKeyID: strconv.Itoa(i), SecretSecretAccessKey: "S"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.entries); n > maxCachedClients {
		t.Errorf("cache holds %d clients, want at most %d", n, maxCachedClients)
	}
}

func TestMissingDriverCredentialsAreAFailedPrecondition(t *testing.T) {
	c := newClients(s3client.Endpoint{URL: "http://127.0.0.1:1"}, http.DefaultClient,
		func() (s3client.Credentials, error) { return s3client.Credentials{}, errors.New("none") }, time.Minute)
	if _, _, err := c.forSecrets(nil); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("forSecrets(nil) = %v, want FailedPrecondition", err)
	}
}
