package s3fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/s3csi/s3csi/shared/testenv"
)

func putBytes(ctx context.Context, s *testenv.S3, key string, body []byte) error {
	_, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
	})
	return err
}

// getBytes returns an object's content, or ok=false when it does not exist.
func getBytes(ctx context.Context, s *testenv.S3, key string) ([]byte, bool, error) {
	out, err := s.RootClient().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return b, true, err
}

// proxyEndpoint returns the URL of a reverse proxy to endpoint that calls before with every
// request, then forwards it. The proxy keeps the Host header, so signatures stay valid.
func proxyEndpoint(tb testing.TB, endpoint string, before func(*http.Request)) string {
	tb.Helper()
	return interceptEndpoint(tb, endpoint, func(_ http.ResponseWriter, r *http.Request) bool {
		before(r)
		return false
	})
}

// interceptEndpoint returns the URL of a reverse proxy to endpoint that lets answer respond to
// each request first; a request answer did not respond to (it returned false) is forwarded.
func interceptEndpoint(tb testing.TB, endpoint string, answer func(http.ResponseWriter, *http.Request) bool) string {
	tb.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	tb.Cleanup(func() {
		srv.Close()
		transport.CloseIdleConnections()
	})
	return srv.URL
}
