// Package s3client builds the S3 clients the csi-controller uses to reach the configured S3
// endpoint (Scality RING, or any S3 service) when it creates and deletes buckets: a fixed
// endpoint, path-style addressing, static credentials, and TLS verified against a custom CA
// bundle. (The mounter builds its own client, from the AWS configuration chain, in s3fs.)
//
// It builds clients from explicit settings only. It never reads the shared AWS configuration
// files, profiles or instance metadata, so a client can only ever sign with the credentials it
// was given and only ever talk to the endpoint it was given.
package s3client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3csi/shared/cabundle"
)

// DefaultRegion is the region requests are signed for when none is configured. S3-compatible
// services such as Scality RING accept it.
const DefaultRegion = "us-east-1"

// Endpoint is where S3 is and how to reach it; it is shared by every client of a process.
type Endpoint struct {
	// URL is the endpoint, e.g. https://s3.example.com:8443. Required.
	URL string
	// Region is the default signing region; DefaultRegion when empty.
	Region string
	// CABundle is a PEM file of CAs trusted for the endpoint's certificate, in addition to the
	// system roots. Empty trusts the system roots only.
	CABundle string
	// PathStyle addresses buckets as <endpoint>/<bucket> rather than <bucket>.<host>; most
	// on-premises endpoints (and any endpoint reached by IP address) need it.
	PathStyle bool
}

// Credentials are static S3 credentials. They are secrets: never log them.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken is set for temporary credentials.
	SessionToken string
}

// Valid reports whether both halves of the key are set.
func (c Credentials) Valid() bool {
	return c.AccessKeyID != "" && c.SecretAccessKey != ""
}

// ValidateEndpointURL checks that raw is an absolute http or https URL with a host, so that a
// typo fails at start-up with the flag's name rather than on the first request.
func ValidateEndpointURL(raw string) error {
	if raw == "" {
		return errors.New("the S3 endpoint URL is required, e.g. https://s3.example.com")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse S3 endpoint URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("want an http:// or https:// S3 endpoint URL, got %q", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("S3 endpoint URL %q has no host", raw)
	}
	return nil
}

// NewHTTPClient returns the HTTP client for the endpoint: one connection pool, TLS trusting the
// system roots plus ep.CABundle. Share it between the clients of one process.
func NewHTTPClient(ep Endpoint) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ep.CABundle != "" {
		pool, err := loadCABundle(ep.CABundle)
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:       tlsConfig,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: transport}, nil
}

// loadCABundle returns the system roots plus the CAs of the PEM file at path, checked as the
// node-agent and the mounter check the same bundle (cabundle.Parse).
func loadCABundle(path string) (*x509.CertPool, error) {
	data, err := cabundle.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return cabundle.Pool(data)
}

// New returns an S3 client for ep signed with creds, sending through httpClient (see
// NewHTTPClient). region overrides ep.Region when not empty (a per-volume secret may name one).
func New(ep Endpoint, region string, creds Credentials, httpClient *http.Client) (*s3.Client, error) {
	if err := ValidateEndpointURL(ep.URL); err != nil {
		return nil, fmt.Errorf("build S3 client: %w", err)
	}
	if !creds.Valid() {
		return nil, errors.New("build S3 client: an access key ID and a secret access key are required")
	}
	if region == "" {
		region = ep.Region
	}
	if region == "" {
		region = DefaultRegion
	}
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(ep.URL),
		Region:       region,
		Credentials: credentials.NewStaticCredentialsProvider(
			creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		UsePathStyle: ep.PathStyle,
		HTTPClient:   httpClient,
		// Checksums only when the operation requires them: several S3-compatible services
		// reject the newer default trailing checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}), nil
}
